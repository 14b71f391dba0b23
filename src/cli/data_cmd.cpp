#include <chrono>
#include <cstdio>

#include "cli/commands.h"
#include "data/tokenizer.h"

namespace scaletrain::cli {

namespace {

struct DataPrepareFlags {
  PrepareOptions opts;
  std::string tokenizer;  // --tokenizer, empty when not given
  std::string vocab;      // --vocab: the HF vocab.json, or the old spelling of --tokenizer
};

// --vocab names the Hugging Face vocab.json under --tokenizer hf; without
// --tokenizer it is the old spelling `--vocab char|byte`.
Status ResolveTokenizer(DataPrepareFlags* f) {
  PrepareOptions& o = f->opts;
  const std::string usage =
      "; choose the tokenizer with --tokenizer char|byte|bpe|hf (hf: --tokenizer hf --vocab "
      "vocab.json --merges merges.txt)";
  if (f->tokenizer.empty()) {
    if (!f->vocab.empty() && f->vocab != "char" && f->vocab != "byte") {
      return InvalidArgument("data prepare: --vocab " + f->vocab +
                             " without --tokenizer hf: alone, --vocab is the old spelling of "
                             "--tokenizer char|byte" +
                             usage);
    }
    o.tokenizer = f->vocab.empty() ? "char" : f->vocab;
    return Status::Ok();
  }
  o.tokenizer = f->tokenizer;
  if (o.tokenizer == "hf") {
    o.hf_vocab = f->vocab;
  } else if (!f->vocab.empty() && f->vocab != o.tokenizer) {
    return InvalidArgument("data prepare: --vocab " + f->vocab + " does not go with --tokenizer " +
                           o.tokenizer + " (--vocab FILE is for --tokenizer hf)" + usage);
  }
  return Status::Ok();
}

void RunPrepare(DataPrepareFlags* f, int* exit_code) {
  const auto start = std::chrono::steady_clock::now();
  Status st = ResolveTokenizer(f);
  Result<PrepareSummary> r = st.ok() ? PrepareTextData(f->opts) : Result<PrepareSummary>(st);
  if (!r.ok()) {
    std::fprintf(stderr, "error: %s\n", r.status().message().c_str());
    *exit_code = 1;
    return;
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const bool bpe = f->opts.tokenizer == "bpe" || f->opts.tokenizer == "hf";
  std::printf(
      "wrote %s/{train.bin,val.bin,vocab.json%s}: %s vocab %lld, train %lld tokens, "
      "val %lld tokens (%.2f s)\n",
      f->opts.output_dir.c_str(), bpe ? ",hf_vocab.json,hf_merges.txt" : "",
      f->opts.tokenizer.c_str(), static_cast<long long>(r->vocab_size),
      static_cast<long long>(r->train_tokens), static_cast<long long>(r->val_tokens), seconds);
}

}  // namespace

void RegisterDataCommand(CLI::App& app, int* exit_code) {
  auto* data = app.add_subcommand("data", "prepare token data");
  data->require_subcommand(1);
  auto* prep = data->add_subcommand(
      "prepare", "tokenize a text file into train/val shards (llm.c .bin format) and vocab.json");
  auto f = std::make_shared<DataPrepareFlags>();
  prep->add_option("--input", f->opts.input, "text file to tokenize")->required();
  prep->add_option("--output", f->opts.output_dir, "directory for train.bin, val.bin, vocab.json")
      ->required();
  prep->add_option("--val-fraction", f->opts.val_fraction,
                   "fraction of the text (at the end) kept for validation")
      ->capture_default_str();
  prep->add_option("--tokenizer", f->tokenizer,
                   "char (one id per character, the default), byte, bpe (byte-level BPE trained "
                   "on the input; needs --vocab-size) or hf (a Hugging Face byte-level BPE: "
                   "--vocab vocab.json --merges merges.txt)");
  prep->add_option("--vocab-size", f->opts.vocab_size,
                   "bpe: tokens in the vocabulary, the 256 bytes included (>= 256)");
  prep->add_option("--vocab", f->vocab,
                   "hf: the vocab.json file; without --tokenizer, char or byte (old spelling "
                   "of --tokenizer)");
  prep->add_option("--merges", f->opts.hf_merges, "hf: the merges.txt file");
  prep->callback([f, exit_code] { RunPrepare(f.get(), exit_code); });
}

}  // namespace scaletrain::cli

#include <cstdio>

#include "cli/commands.h"
#include "train/tokenizer.h"

namespace scaletrain::cli {

void RegisterDataCommand(CLI::App& app, int* exit_code) {
  auto* data = app.add_subcommand("data", "prepare token data");
  data->require_subcommand(1);
  auto* prep = data->add_subcommand(
      "prepare", "tokenize a text file into train/val shards (llm.c .bin format) and vocab.json");
  auto opts = std::make_shared<PrepareOptions>();
  prep->add_option("--input", opts->input, "text file to tokenize")->required();
  prep->add_option("--output", opts->output_dir, "directory for train.bin, val.bin, vocab.json")->required();
  prep->add_option("--val-fraction", opts->val_fraction, "fraction of the text (at the end) kept for validation")
      ->capture_default_str();
  prep->add_option("--vocab", opts->vocab, "vocabulary: char (one id per character) or byte")
      ->capture_default_str();
  prep->callback([opts, exit_code] {
    auto r = PrepareTextData(*opts);
    if (!r.ok()) {
      std::fprintf(stderr, "error: %s\n", r.status().message().c_str());
      *exit_code = 1;
      return;
    }
    std::printf("wrote %s/{train.bin,val.bin,vocab.json}: vocab %lld, train %lld tokens, val %lld tokens\n",
                opts->output_dir.c_str(), static_cast<long long>(r->vocab_size),
                static_cast<long long>(r->train_tokens), static_cast<long long>(r->val_tokens));
  });
}

}  // namespace scaletrain::cli

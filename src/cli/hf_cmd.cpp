// `scaletrain export CHECKPOINT --format hf --out DIR` and
// `scaletrain import DIR --out OUT`: Hugging Face model directories
// (checkpoint/hf_interop.h).
#include <cstdio>

#include "checkpoint/hf_interop.h"
#include "cli/commands.h"

namespace scaletrain::cli {

namespace {

void Fail(const Status& st, int* exit_code) {
  std::fprintf(stderr, "error: %s\n", st.message().c_str());
  *exit_code = 1;
}

std::string Describe(const ModelSpec& s) {
  return std::to_string(s.n_layer) + " layers, " + std::to_string(s.n_head) + " heads, " +
         std::to_string(s.n_embd) + " wide, context " + std::to_string(s.block_size) +
         ", vocabulary " + std::to_string(s.vocab_size);
}

}  // namespace

void RegisterExportCommand(CLI::App& app, int* exit_code) {
  auto* cmd = app.add_subcommand("export", "write a checkpoint as a Hugging Face model directory");
  struct Args {
    std::string checkpoint, format, out;
  };
  auto args = std::make_shared<Args>();
  cmd->add_option("checkpoint", args->checkpoint, "checkpoint directory, or a run directory")
      ->required();
  cmd->add_option("--format", args->format, "output format")
      ->required()
      ->check(CLI::IsMember({"hf"}));
  cmd->add_option("--out", args->out, "new directory to write (must not hold files)")->required();
  cmd->callback([args, exit_code] {
    Result<HfExportSummary> s = ExportHf(args->checkpoint, args->out);
    if (!s.ok()) return Fail(s.status(), exit_code);
    std::printf("exported %s (%lld tensors) to %s\n", Describe(s->spec).c_str(),
                static_cast<long long>(s->tensors), args->out.c_str());
    if (s->vocab_kind.empty()) {
      std::printf("note: the checkpoint has no vocabulary, so no tokenizer files were written\n");
    } else {
      std::printf("tokenizer: tokenizer.json for the %s vocabulary\n", s->vocab_kind.c_str());
    }
  });
}

void RegisterImportCommand(CLI::App& app, int* exit_code) {
  auto* cmd = app.add_subcommand("import", "read a Hugging Face model directory as a checkpoint");
  struct Args {
    std::string dir, out;
  };
  auto args = std::make_shared<Args>();
  cmd->add_option("dir", args->dir, "model directory (config.json, model.safetensors)")->required();
  cmd->add_option("--out", args->out, "new directory to write (must not hold files)")->required();
  cmd->callback([args, exit_code] {
    Result<HfImportSummary> s = ImportHf(args->dir, args->out);
    if (!s.ok()) return Fail(s.status(), exit_code);
    std::printf("imported %s as %s\n", Describe(s->spec).c_str(), s->checkpoint_dir.c_str());
    if (s->converted_tensors > 0) {
      std::printf("%lld tensors converted to F32\n", static_cast<long long>(s->converted_tensors));
    }
    if (!s->vocab_kind) {
      std::printf(
          "note: no scaletrain_vocab.json in %s: the checkpoint has no vocabulary (sample "
          "decodes ids as bytes; train with data tokenized for this model)\n",
          args->dir.c_str());
    }
    std::printf("fine-tune it with: scaletrain train --set 'training.init_from=\"%s\"' ...\n",
                args->out.c_str());
  });
}

}  // namespace scaletrain::cli

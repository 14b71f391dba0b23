#include <cstdio>

#include "checkpoint/model_io.h"
#include "cli/commands.h"
#include "kernels/cpu/ops.h"
#include "train/generate.h"

namespace scaletrain::cli {

void RegisterSampleCommand(CLI::App& app, int* exit_code) {
  auto* cmd = app.add_subcommand("sample", "generate text from a checkpoint");
  struct Args {
    std::string checkpoint, prompt = "\n";
    int64_t tokens = 300;
    double temperature = 0.8;
    uint64_t seed = 1337;
    int threads = 0;
  };
  auto args = std::make_shared<Args>();
  cmd->add_option("--checkpoint", args->checkpoint, "checkpoint directory, or a run directory")->required();
  cmd->add_option("--prompt", args->prompt, "text to continue")->capture_default_str();
  cmd->add_option("--tokens", args->tokens, "tokens to generate")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--temperature", args->temperature, "softmax temperature (0: greedy)")
      ->capture_default_str()->check(CLI::NonNegativeNumber);
  cmd->add_option("--seed", args->seed, "sampling seed")->capture_default_str();
  cmd->add_option("--threads", args->threads, "threads (0: all cores)")->capture_default_str();
  cmd->callback([args, exit_code] {
    cpu::SetNumThreads(args->threads);
    auto loaded = LoadModelForInference(args->checkpoint, 1);
    if (!loaded.ok()) {
      std::fprintf(stderr, "error: %s\n", loaded.status().message().c_str());
      *exit_code = 1;
      return;
    }
    auto prompt = loaded->vocab.Encode(args->prompt);
    if (!prompt.ok()) {
      std::fprintf(stderr, "error: the prompt cannot be encoded: %s\n", prompt.status().message().c_str());
      *exit_code = 2;
      return;
    }
    std::printf("%s", args->prompt.c_str());
    GenerateOptions g{args->tokens, args->temperature, args->seed};
    Vocabulary& vocab = loaded->vocab;
    Generate(*loaded->model, *prompt, g, [&](int32_t id) {
      std::printf("%s", vocab.Decode({id}).c_str());
      std::fflush(stdout);
    });
    std::printf("\n");
  });
}

}  // namespace scaletrain::cli

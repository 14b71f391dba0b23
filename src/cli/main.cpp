// scaletrain: train, plan, bench and report, one binary.
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "core/strings.h"
#include "core/version.h"

namespace {

// The subcommands in the order a user meets them (so `--help` lists them
// so), each with one command that works from the repository's root.
constexpr const char* kUsualOrder =
    "The usual order, one example each (from the repository's root):\n"
    "  1. data prepare  scaletrain data prepare --input data/tinyshakespeare.txt --output "
    "build/data/shakespeare_char\n"
    "  2. train         scaletrain train --config configs/shakespeare_char.toml --run-dir "
    "runs/first\n"
    "  3. report        scaletrain report runs/first        (writes runs/first/report/index.html)\n"
    "  4. sample        scaletrain sample --checkpoint runs/first --prompt \"ROMEO:\"\n"
    "  5. export        scaletrain export runs/first --format hf --out runs/first-hf\n"
    "     import        scaletrain import runs/first-hf --out runs/imported\n"
    "Planning a GPU cluster:\n"
    "  6. bench         scaletrain bench --output hw.toml  (this machine, as a profile plan and "
    "report read)\n"
    "  7. plan          scaletrain plan --model gpt3-175b --cluster dgx-a100 --gpus 1024 --search\n"
    "Surviving a lost host:\n"
    "  8. launch        scaletrain launch --hostfile hosts -- train --config configs/shakespeare_char.toml "
    "--run-dir runs/elastic\n"
    "`scaletrain COMMAND --help` lists a command's flags; README.md has a section per job.";

// A first word that is not a subcommand is an error, also with --help
// (CLI11 would print the main help and exit 0, hiding the typo).
bool UnknownCommand(const CLI::App& app, int argc, char** argv) {
  if (argc < 2 || argv[1][0] == '-') return false;
  std::vector<std::string> names;
  for (const CLI::App* sub : app.get_subcommands({})) names.push_back(sub->get_name());
  for (const std::string& n : names) {
    if (n == argv[1]) return false;
  }
  std::string list;
  for (const std::string& n : names) list += (list.empty() ? "" : ", ") + n;
  const std::string hint = scaletrain::DidYouMean(argv[1], names);
  std::fprintf(
      stderr,
      "error: unknown command '%s'%s commands: %s (scaletrain --help shows them in order)\n",
      argv[1], hint.empty() ? ";" : hint.c_str(), list.c_str());
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"scaletrain: train GPT-style models with data, tensor and pipeline parallelism, "
               "and plan how to scale them"};
  app.set_version_flag("--version", std::string("scaletrain ") + scaletrain::ScaletrainVersion());
  app.require_subcommand(1);
  app.footer(kUsualOrder);
  int exit_code = 0;
  scaletrain::cli::RegisterDataCommand(app, &exit_code);
  scaletrain::cli::RegisterTrainCommand(app, &exit_code);
  scaletrain::cli::RegisterReportCommand(app, &exit_code);
  scaletrain::cli::RegisterSampleCommand(app, &exit_code);
  scaletrain::cli::RegisterExportCommand(app, &exit_code);
  scaletrain::cli::RegisterImportCommand(app, &exit_code);
  scaletrain::cli::RegisterBenchCommand(app, &exit_code);
  scaletrain::cli::RegisterPlanCommand(app, &exit_code);
  scaletrain::cli::RegisterLaunchCommand(app, &exit_code);
  if (UnknownCommand(app, argc, argv)) return static_cast<int>(CLI::ExitCodes::ExtrasError);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  return exit_code;
}

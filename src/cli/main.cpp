// scaletrain: train, plan, bench and report, one binary.
#include <cstdio>

#include "cli/commands.h"
#include "core/version.h"

int main(int argc, char** argv) {
  CLI::App app{"scaletrain: train GPT-style models with data, tensor and pipeline parallelism, "
               "and plan how to scale them"};
  app.set_version_flag("--version", std::string("scaletrain ") + scaletrain::ScaletrainVersion());
  app.require_subcommand(1);
  int exit_code = 0;
  scaletrain::cli::RegisterDataCommand(app, &exit_code);
  scaletrain::cli::RegisterTrainCommand(app, &exit_code);
  scaletrain::cli::RegisterSampleCommand(app, &exit_code);
  scaletrain::cli::RegisterPlanCommand(app, &exit_code);
  scaletrain::cli::RegisterBenchCommand(app, &exit_code);
  scaletrain::cli::RegisterReportCommand(app, &exit_code);
  scaletrain::cli::RegisterExportCommand(app, &exit_code);
  scaletrain::cli::RegisterImportCommand(app, &exit_code);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  return exit_code;
}

// Subcommands of the scaletrain binary, one file each. Each Register function
// adds its subcommand to the app; the subcommand's callback writes the
// process exit code into *exit_code (0 on success, non-zero after printing
// one clear error line to stderr).
#pragma once

#include <CLI/CLI.hpp>

namespace scaletrain::cli {

void RegisterDataCommand(CLI::App& app, int* exit_code);    // data_cmd.cpp
void RegisterTrainCommand(CLI::App& app, int* exit_code);   // train_cmd.cpp
void RegisterSampleCommand(CLI::App& app, int* exit_code);  // sample_cmd.cpp
void RegisterPlanCommand(CLI::App& app, int* exit_code);    // plan_cmd.cpp
void RegisterBenchCommand(CLI::App& app, int* exit_code);   // bench_cmd.cpp
void RegisterReportCommand(CLI::App& app, int* exit_code);  // report_cmd.cpp
void RegisterExportCommand(CLI::App& app, int* exit_code);  // hf_cmd.cpp
void RegisterImportCommand(CLI::App& app, int* exit_code);  // hf_cmd.cpp
void RegisterLaunchCommand(CLI::App& app, int* exit_code);  // launch_cmd.cpp

}  // namespace scaletrain::cli

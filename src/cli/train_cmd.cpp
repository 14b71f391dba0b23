#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <thread>

#include "cli/commands.h"
#include "core/config.h"
#include "train/stop_signals.h"
#include "train/trainer.h"

namespace scaletrain::cli {
namespace {

// runs/<config name>-<YYYYmmdd-HHMMSS>
std::string DefaultRunDir(const std::string& config_path) {
  std::time_t now = std::time(nullptr);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", std::localtime(&now));
  return "runs/" + std::filesystem::path(config_path).stem().string() + "-" + stamp;
}

}  // namespace

void RegisterTrainCommand(CLI::App& app, int* exit_code) {
  auto* cmd = app.add_subcommand("train", "train a model from a TOML config");
  struct Args {
    std::string config, run_dir, resume;
    std::vector<std::string> sets;
    std::string trace;
    bool quiet = false;
  };
  auto args = std::make_shared<Args>();
  cmd->add_option("--config", args->config, "TOML config (see configs/)")->required();
  cmd->add_option("--set", args->sets, "override a config value: section.key=value (repeatable)");
  cmd->add_option("--run-dir", args->run_dir, "output directory (default runs/<config>-<time>)");
  cmd->add_option("--resume", args->resume,
                  "continue from a checkpoint directory, or the newest intact one in a run "
                  "directory; 'auto': the newest intact one in --run-dir if any, else start");
  cmd->add_flag("--quiet", args->quiet, "no per-step lines");
  cmd->add_option("--trace", args->trace,
                  "write a Chrome trace (Perfetto) per rank; %r in the name is the rank");
  cmd->callback([args, exit_code] {
    auto cfg = LoadRunConfig(args->config, args->sets);
    if (!cfg.ok()) {
      std::fprintf(stderr, "error: %s\n", cfg.status().message().c_str());
      *exit_code = 2;
      return;
    }
    TrainOptions opts;
    opts.config = std::move(cfg).value();
    opts.resume = args->resume;
    opts.run_dir = args->run_dir;
    if (opts.run_dir.empty() && opts.resume.empty()) opts.run_dir = DefaultRunDir(args->config);
    opts.quiet = args->quiet;
    opts.trace = args->trace;
    StopSignals::Install();
    auto r = RunTraining(opts);
    if (!r.ok()) {
      // Start-up errors are the same on every rank: rank 0 reports them.
      // (Errors in a collective are reported by the rank that saw them.)
      // The other ranks hold back their exit: mpirun ends the whole job as
      // soon as one rank exits non-zero, which could kill rank 0 before it
      // has printed. Rank 0's non-zero exit ends them in turn.
      if (LaunchedRank() == 0) {
        std::fprintf(stderr, "error: %s\n", r.status().message().c_str());
        std::fflush(stderr);
      } else {
        std::this_thread::sleep_for(std::chrono::seconds(5));
      }
      *exit_code = 1;
      return;
    }
    if (r->preempted) {
      // Every rank exits with this code, so a launcher that reports the
      // first non-zero exit reports it.
      *exit_code = kExitPreempted;
      if (r->rank != 0) return;
      std::printf(
          "stopped by %s after %lld steps; checkpoint %s; continue with --resume auto "
          "(exit code %d)\n",
          SignalName(r->stop_signal), static_cast<long long>(r->steps_run),
          r->last_checkpoint.c_str(), kExitPreempted);
      std::fflush(stdout);
      return;
    }
    if (r->rank != 0) return;
    if (r->already_finished) {
      std::printf("already finished: checkpoint %s is at training.steps = %lld; nothing to do "
                  "(raise training.steps to train further)\n",
                  r->last_checkpoint.c_str(), static_cast<long long>(opts.config.training.steps));
      return;
    }
    std::printf("done: %lld steps, final loss %.4f, val loss %.4f, %.0f tokens/s; checkpoint %s\n",
                static_cast<long long>(r->steps_run), r->final_loss, r->final_val_loss,
                r->tokens_per_s, r->last_checkpoint.c_str());
  });
}

}  // namespace scaletrain::cli

// The training loop on one rank: data -> forward/backward over micro-batches
// -> clip -> AdamW, with validation, metrics, checkpoints and resume.
#pragma once

#include <string>

#include "core/config.h"
#include "core/status.h"

namespace scaletrain {

struct TrainOptions {
  RunConfig config;
  std::string run_dir;  // created; must not already hold a run
  // A checkpoint dir or a run dir; "auto": the newest intact checkpoint in
  // run_dir if it has one, else a fresh start; empty: a fresh start.
  std::string resume;
  bool quiet = false;   // no per-step lines (tests)
  // "self" (one process), "mpi", or "auto": mpi when launched by mpirun or
  // when the layout has more than one rank.
  std::string backend = "auto";
  std::string trace;    // Chrome trace JSON path; "%r" is replaced by the rank
};

// This process's rank as the launcher announced it (0 without a launcher);
// known before MPI starts, so only rank 0 reports start-up errors.
int LaunchedRank();

struct TrainSummary {
  int64_t steps_run = 0;
  double final_loss = 0.0;
  double final_val_loss = 0.0;
  double tokens_per_s = 0.0;
  std::string last_checkpoint;
  int rank = 0;
  // Stopped early by a signal (stop_signals.h), after writing a checkpoint
  // of the step it stopped at.
  bool preempted = false;
  int stop_signal = 0;
  // --resume auto found the run already at training.steps: no step was run.
  bool already_finished = false;
};

Result<TrainSummary> RunTraining(const TrainOptions& opts);

}  // namespace scaletrain

// Setting up one rank's training run, before the first step. Each part is
// built by its own function from the parts it needs, so the order is the
// data's: the data and the model spec it implies, the process groups, the
// parallel model (parallel/parallel_model.h: this rank's shard with its
// layout applied), its weights (initialised, restored from a checkpoint, or
// taken from training.init_from), and the run directory. The trainer
// (trainer.cpp) then only runs steps.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "core/config.h"
#include "core/status.h"
#include "data/data.h"
#include "data/tokenizer.h"
#include "model/spec.h"
#include "parallel/parallel_model.h"
#include "parallel/process_groups.h"
#include "telemetry/metrics.h"
#include "telemetry/prometheus.h"
#include "telemetry/rank_records.h"
#include "telemetry/tensorboard.h"
#include "train/trainer.h"

namespace scaletrain {

// The data a run reads.
struct TrainingData {
  // data.vocab, else vocab.json beside data.train, else none (token ids are
  // their own text). Read once.
  std::optional<Vocabulary> vocab;
  std::unique_ptr<TokenDataset> train, val;
  // Batch k's sequences, whatever the layout (data.h).
  std::unique_ptr<BatchSampler> train_batches, val_batches;
};

// Where the run starts.
struct ResumePoint {
  std::string checkpoint;  // the checkpoint it continues; empty: a fresh start
  int64_t step = 0;        // steps done before this run
};

// The run directory and the files the lead keeps open in it.
struct RunDirectory {
  std::string path;
  bool continuing = false;  // resuming in place: metrics.jsonl is appended to
  std::optional<MetricsLog> metrics;  // the lead's metrics.jsonl
  std::optional<RankLog> rank_log;    // the lead's ranks.jsonl (telemetry.rank_interval > 0)
  std::unique_ptr<MetricsServer> metrics_server;  // the lead's /metrics (telemetry.metrics_port > 0)
  std::optional<TensorBoardWriter> tensorboard;   // the lead's tb/ (telemetry.tensorboard)
};

// Everything one rank trains with.
struct TrainingRun {
  RunConfig cfg;
  TrainingData data;
  // The model as checkpoints store it; the parallel model's shard pads the
  // embedding further so tensor parallelism splits it evenly.
  ModelSpec spec;
  std::unique_ptr<ProcessGroups> groups;
  std::vector<std::string> hosts;  // every rank's host name, by world rank
  std::unique_ptr<ParallelModel> model;
  ResumePoint start;
  RunDirectory dir;

  bool lead() const { return groups->rank == 0; }  // writes logs, metrics and checkpoints
  // Resumed (--resume auto) from a checkpoint at training.steps: nothing to train.
  bool finished() const { return !start.checkpoint.empty() && start.step >= cfg.training.steps; }
};

// Builds a rank's run: checks the config against the data and the layout
// (each error names the fix; only the start-up checks every rank makes
// alike happen before MPI starts), creates the communicators and the
// parallel model, restores a checkpoint (`opts.resume`) or initialises the
// weights, and prepares the run directory (config.resolved.toml,
// memory.json). Collective: every rank calls it.
Result<std::unique_ptr<TrainingRun>> SetUpTraining(const TrainOptions& opts);

// A collective that failed (the watchdog, or a lost rank) ends the job on
// every surviving rank: the ranks' state can no longer be trusted to agree.
// Prints the error and aborts; returns only when `st` is ok.
void AbortIfFailed(Communicator& world, const Status& st);

// Every rank learns whether any rank failed `during` something ("during
// start-up"), so none waits forever in a collective for a rank that gave up.
// Returns this rank's error, or one saying another rank failed.
Status AgreeAcrossRanks(Communicator& world, const Status& local, const std::string& during);

// One rank (dp 0, tp 0) of every pipeline stage contributes `mine`; every
// rank gets all stages' (collective over the world).
std::vector<std::vector<int64_t>> GatherByStage(ProcessGroups& groups,
                                                const std::vector<int64_t>& mine);

// What this rank holds (params, grads, optimizer state, activations).
MemoryRecord RankMemory(const ParallelModel& model);

// The start-up summary lines (model, batch, layout, data) on the console.
void PrintRunSummary(const TrainingRun& run);
// After training: `tokens` of text sampled from `model` (from the whole
// model read back from `last_checkpoint` where no rank holds it all). Lead
// rank only.
Status PrintSample(ParallelModel& model, const std::optional<Vocabulary>& vocab,
                   uint64_t seed, int64_t tokens, const std::string& last_checkpoint);

}  // namespace scaletrain

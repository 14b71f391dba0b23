// Setting up one rank's training run, before the first step, and what it
// builds: data and vocabulary, the model spec and its layout checks, the
// process groups, this rank's model shard, data parallelism, the optimizer,
// the pipeline executor, the state a checkpoint restores, and the run
// directory. The trainer (trainer.cpp) then only runs steps.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "core/config.h"
#include "core/status.h"
#include "data/data.h"
#include "data/tokenizer.h"
#include "model/gpt.h"
#include "parallel/data_parallel.h"
#include "parallel/pipeline.h"
#include "parallel/process_groups.h"
#include "parallel/schedule.h"
#include "parallel/zero3.h"
#include "telemetry/metrics.h"
#include "telemetry/prometheus.h"
#include "telemetry/rank_records.h"
#include "train/optimizer.h"
#include "train/trainer.h"

namespace scaletrain {

// Everything one rank trains with. Members are declared in the order they
// depend on each other (each is built from those above it).
struct TrainingRun {
  RunConfig cfg;
  // The vocabulary: data.vocab, else vocab.json beside data.train, else none
  // (token ids are their own text). Read once.
  std::optional<Vocabulary> vocab;
  std::unique_ptr<TokenDataset> train_data, val_data;
  // `spec` is the model as checkpoints store it; the model on the ranks
  // pads its embedding further so tensor parallelism splits it evenly.
  ModelSpec spec;
  int64_t micro_batches =
      1;  // per DP rank and step: gradient accumulation, the pipeline's micro-batches
  PipelineSchedule schedule;
  std::unique_ptr<BatchSampler> train_batches, val_batches;
  std::unique_ptr<ProcessGroups> groups;
  std::unique_ptr<GPT> model;
  std::unique_ptr<DataParallel> dp;
  // ZeRO-3 (parallel.zero = 3): this rank's parameter shard and the gather
  // buffers the model reads through; the model then holds no parameters.
  std::unique_ptr<Zero3Params> zero3;
  // The parameters the optimizer updates and checkpoints read: the model's
  // flat buffer, or ZeRO-3's shard (indexed like the optimizer's moments).
  float* opt_params() { return zero3 ? zero3->shard() : model->params(); }
  std::unique_ptr<AdamW> optimizer;
  std::unique_ptr<PipelineExecutor> pipeline;
  LrSchedule lr_schedule;
  int64_t start_step = 0;  // steps done before this run (a resumed checkpoint's)
  std::string resumed_from;  // the checkpoint it continues, if any
  std::string run_dir;
  bool continuing = false;  // resuming a run directory in place: metrics.jsonl is appended to
  std::optional<MetricsLog> metrics;  // the lead's metrics.jsonl
  std::optional<RankLog> rank_log;    // the lead's ranks.jsonl (telemetry.rank_interval > 0)
  std::unique_ptr<MetricsServer> metrics_server;  // the lead's /metrics (telemetry.metrics_port > 0)
  std::vector<std::string> hosts;  // every rank's host name, by world rank

  int64_t rank() const { return groups->rank; }
  bool lead() const { return groups->rank == 0; }  // writes logs, metrics and checkpoints
  bool sharded() const { return cfg.parallel.tp > 1 || cfg.parallel.pp > 1; }
  // Resumed (--resume auto) from a checkpoint at training.steps: nothing to train.
  bool finished() const { return !resumed_from.empty() && start_step >= cfg.training.steps; }
  // A collective that failed (the watchdog, or a lost rank) ends the job on
  // every surviving rank: the ranks' state can no longer be trusted to agree.
  // Prints the error and aborts; returns only when `st` is ok.
  void AbortIfFailed(const Status& st) const;
};

// Builds a rank's run: checks the config against the data and the layout
// (each error names the fix; only the start-up checks every rank makes
// alike happen before MPI starts), creates the communicators, the model,
// data parallelism, the optimizer and the executor, restores a checkpoint
// (`opts.resume`) or initialises the weights, and prepares the run directory
// (config.resolved.toml, memory.json). Collective: every rank calls it.
Result<std::unique_ptr<TrainingRun>> SetUpTraining(const TrainOptions& opts);

// Every rank learns whether any rank failed `during` something ("during
// start-up"), so none waits forever in a collective for a rank that gave up.
// Returns this rank's error, or one saying another rank failed.
Status AgreeAcrossRanks(Communicator& world, const Status& local, const std::string& during);

// What each rank of every pipeline stage holds (params, grads, optimizer
// state, activations): this rank's, and one rank's per stage (collective).
MemoryRecord RankMemory(const TrainingRun& run);
std::vector<MemoryRecord> MemoryByStage(TrainingRun& run, const MemoryRecord& mine);
// The same gathering for any per-rank figures: one rank (dp 0, tp 0) of
// every stage contributes `mine`; every rank gets all stages'.
std::vector<std::vector<int64_t>> GatherByStage(TrainingRun& run, const std::vector<int64_t>& mine);

// The start-up summary lines (model, batch, layout, data) on the console.
void PrintRunSummary(const TrainingRun& run);
// After training: `tokens` of text sampled from the trained model (for a
// sharded model, the whole model read back from `last_checkpoint`). Lead
// rank only.
Status PrintSample(TrainingRun& run, int64_t tokens, const std::string& last_checkpoint);

}  // namespace scaletrain

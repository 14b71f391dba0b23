// Checkpoints of a training run, at any layout (the format is
// checkpoint/checkpoint_format.h). Saving is sharded and asynchronous: each rank
// copies its part of the state (a snapshot) and a background thread writes
// it while training goes on; once every rank's file is written the lead
// writes the manifest, verifies the new checkpoint and only then removes old
// ones. Loading reads either format (sharded, or whole tensors from before)
// and takes this rank's shard, whatever layout wrote it.
#pragma once

#include <atomic>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "checkpoint/checkpoint_dir.h"
#include "checkpoint/checkpoint_format.h"
#include "core/buffer.h"
#include "core/status.h"
#include "data/tokenizer.h"
#include "parallel/mesh.h"
#include "parallel/parallel_model.h"
#include "train/trainer.h"

namespace scaletrain {

// The checkpoint `opts.resume` asks for: "" (a fresh start), a checkpoint
// directory, a run directory's newest intact checkpoint, or with "auto" the
// newest intact checkpoint in the run directory if it has any (else a fresh
// start). The lead decides (verifying checksums; a damaged newer checkpoint
// is skipped with a warning naming it) and tells the others. Collective.
Result<std::string> ChooseCheckpoint(Communicator& world, const TrainOptions& opts);

// Loads checkpoint `dir` into this rank's shard of the parameters and its
// part of the optimizer state (before ParallelModel::CommitWeights), and
// returns the step it was written at. `spec` is the model as checkpoints
// store it. Refuses a checkpoint of another model, or one already at
// `training_steps` unless `finished_ok` (the run is then done: --resume auto
// run again after the last step, as a requeued job is, has nothing left to
// do) or beyond it. The lead says where it resumes.
Result<int64_t> RestoreCheckpoint(ParallelModel& model, const ModelSpec& spec,
                                  const std::string& dir, int64_t training_steps,
                                  bool finished_ok, bool lead);

// training.init_from: this rank's shard of the parameters of the checkpoint
// at `path` (a checkpoint or run directory, written by any layout or by
// `scaletrain import`); the optimizer starts fresh at step 0. Refuses a
// checkpoint of another model or vocabulary. Collective.
Status InitFromCheckpoint(Communicator& world, ParallelModel& model, const ModelSpec& spec,
                          const std::optional<Vocabulary>& vocab, const std::string& path);

// What a run's checkpoints save beside its state, and who writes them.
struct CheckpointContext {
  Communicator* world = nullptr;  // the lead (rank 0) writes the manifest
  std::string run_dir;            // checkpoints go to RUN_DIR/checkpoints
  const RunConfig* cfg = nullptr;
  ModelSpec spec;                    // as checkpoints store it
  const Vocabulary* vocab = nullptr;  // null: the data has none
  const ParallelModel* model = nullptr;  // its shard and training state
  MeshCoord coord;                       // this rank's place in the layout
};

class CheckpointWriter {
 public:
  explicit CheckpointWriter(CheckpointContext ctx);
  ~CheckpointWriter();  // waits for a write in flight (its checkpoint stays incomplete)
  CheckpointWriter(const CheckpointWriter&) = delete;
  CheckpointWriter& operator=(const CheckpointWriter&) = delete;

  // Starts step `step`'s checkpoint: finishes a save still in flight (at
  // most one is), snapshots this rank's part of the state and starts writing
  // it in the background. Returns the checkpoint a finished earlier save
  // produced, if any. Collective.
  Result<std::optional<std::string>> Start(int64_t step, double lr);
  // Whether this rank's background write is done (no save in flight: true).
  bool LocalWriteDone() const;
  // Finishes the save in flight once every rank's write is done (the caller
  // has agreed on that, e.g. with StepBoundary in the trainer): the lead
  // writes the manifest, verifies the checkpoint and prunes old ones.
  // Returns its directory. Collective.
  Result<std::string> Finish();
  bool in_flight() const { return in_flight_; }

 private:
  // What each rank's background write produced.
  struct RankWrite {
    bool ok = false;
    FileDigest file;  // its name, size and SHA-256
  };
  void Snapshot();
  std::vector<RankWrite> GatherWrites();
  Status CommitOnLead(const std::vector<RankWrite>& writes, const std::string& root,
                      const std::string& dir);
  nlohmann::json Manifest(int64_t step, double lr) const;

  bool lead() const { return ctx_.world->rank() == 0; }

  CheckpointContext ctx_;
  ShardSnapshot snapshot_;
  bool in_flight_ = false;
  int64_t step_ = 0;
  nlohmann::json manifest_;  // of the save in flight, as of its snapshot
  std::string tmp_dir_;
  std::thread thread_;
  std::atomic<bool> done_{true};
  Status write_status_;  // the background write's result (read after done_)
  FileDigest digest_;    // of this rank's file
};

}  // namespace scaletrain

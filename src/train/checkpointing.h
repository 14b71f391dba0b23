// Checkpoints of a training run, at any layout: a checkpoint holds whole
// tensors (the checkpoint's model spec, BuildParamLayout) and the whole
// optimizer state, whatever dp x tp x pp wrote it, so it resumes at any
// other layout and `scaletrain sample` loads it on one process.
#pragma once

#include <string>

#include "core/buffer.h"
#include "core/status.h"
#include "train/run_setup.h"

namespace scaletrain {

// Loads the checkpoint `resume` names (a checkpoint directory, or a run
// directory's newest valid one) into this rank's shard of the parameters
// and its part of the optimizer state; sets run.start_step. Refuses a
// checkpoint of another model or one already at training.steps. Returns the
// checkpoint directory.
Result<std::string> RestoreCheckpoint(TrainingRun& run, const std::string& resume);

// Writes step `step`'s checkpoint: every rank contributes its shards, the
// world's sum assembles whole tensors, the lead writes them (atomically) and
// prunes old checkpoints. Collective.
class CheckpointWriter {
 public:
  explicit CheckpointWriter(TrainingRun* run);
  Result<std::string> Save(int64_t step, double lr);
  // The whole parameters of the last save, on the lead (for the sample of a
  // sharded model); the model's own buffer when it is not sharded.
  const float* last_whole_params() const;

 private:
  // Whole tensors from this rank's flat buffer `local` (see model_io.h).
  const float* Assemble(const float* local, Buffer& whole);

  TrainingRun* run_;
  ParamLayout ckpt_layout_;
  Buffer whole_params_;
};

}  // namespace scaletrain

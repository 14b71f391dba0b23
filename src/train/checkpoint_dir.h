// Checkpoint directories: <run_dir>/checkpoints/step_<N, 8 digits>/ holding
// model.safetensors (the parameters, by the parameter-layout names),
// optimizer.safetensors (AdamW moments, same names) and manifest.json
// (written last; the trainer decides its content, and this layer adds a
// "files" entry with each file's size in bytes to detect truncation).
//
// A checkpoint is first written whole under a temporary name in the same
// directory (".tmp-step_<N>-<pid>") and then renamed, so a crash never
// leaves a half-written checkpoint under the real name.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "train/safetensors.h"

namespace scaletrain {

std::string CheckpointDirName(int64_t step);  // "step_00000010"

struct CheckpointContents {
  std::vector<NamedTensor> model;
  std::vector<NamedTensor> optimizer;
  nlohmann::json manifest;  // an object
};

// Writes <checkpoints_root>/step_<N>/ atomically (see above); creates
// checkpoints_root if needed. An existing directory of that step is
// replaced only after the new one is complete.
Status WriteCheckpoint(const std::string& checkpoints_root, int64_t step,
                       const CheckpointContents& contents);

// Deletes all but the newest `keep` complete step_* directories under
// checkpoints_root, and any stale .tmp-* directories.
Status PruneCheckpoints(const std::string& checkpoints_root, int64_t keep);

// Checks manifest.json parses and every file it lists exists with its size.
Status ValidateCheckpoint(const std::string& dir);

// `path` is a checkpoint directory (has manifest.json: validated and
// returned) or a run directory (the newest valid checkpoint under
// path/checkpoints is returned; invalid newer ones are skipped with a note on
// stderr). NotFound with a clear message otherwise.
Result<std::string> ResolveCheckpoint(const std::string& path);

struct LoadedCheckpoint {
  std::string dir;
  nlohmann::json manifest;
  std::unique_ptr<SafetensorsFile> model;
  std::unique_ptr<SafetensorsFile> optimizer;  // null if the file is absent
};
Result<LoadedCheckpoint> ReadCheckpoint(const std::string& dir);

}  // namespace scaletrain

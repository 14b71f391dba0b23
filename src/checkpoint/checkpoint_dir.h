// Checkpoint directories: <run_dir>/checkpoints/step_<N, 8 digits>/ holding
// the data files and manifest.json, written last: the trainer decides its
// content, and this layer adds a "files" entry giving each file's size and
// SHA-256, {"name": {"bytes": N, "sha256": "hex"}} (checkpoints from before
// checksums list the size alone, {"name": N}, and still load).
// Two formats use these directories: whole tensors (model.safetensors with
// the parameters by the parameter-layout names, optimizer.safetensors with
// the AdamW moments; WriteCheckpoint), and the trainer's sharded one
// (checkpoint/checkpoint_format.h: one file per rank).
//
// A checkpoint is first written whole under a temporary name in the same
// directory (".tmp-step_<N>-<tag>") and then renamed, so a crash never
// leaves a half-written checkpoint under the real name: a directory without
// its manifest is incomplete and is never loaded.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "checkpoint/safetensors.h"
#include "core/status.h"

namespace scaletrain {

std::string CheckpointDirName(int64_t step);  // "step_00000010"

// A file of a checkpoint as its manifest records it.
struct FileDigest {
  std::string name;  // in the checkpoint directory
  uint64_t bytes = 0;
  std::string sha256;  // 64 hex digits
};
// Size and SHA-256 of dir/name.
Result<FileDigest> DigestFile(const std::string& dir, const std::string& name);

// The writers' steps. BeginCheckpointDir makes a clean temporary directory
// root/.tmp-step_<N>-<tag> (creating root; removing debris of an earlier
// attempt with the same tag) and returns it; the files go there.
// CommitCheckpointDir writes `manifest` with the "files" entry for `files`
// into it, flushes everything, and renames it to root/step_<N>, atomically
// replacing a checkpoint of that step already there. The temporary is gone
// afterwards, whether it succeeded or not.
Result<std::string> BeginCheckpointDir(const std::string& checkpoints_root, int64_t step,
                                       const std::string& tag);
Status CommitCheckpointDir(const std::string& tmp_dir, const std::string& checkpoints_root,
                           int64_t step, nlohmann::json manifest,
                           const std::vector<FileDigest>& files);

struct CheckpointContents {
  std::vector<NamedTensor> model;
  std::vector<NamedTensor> optimizer;
  nlohmann::json manifest;  // an object
};

// Writes a whole-tensor checkpoint <checkpoints_root>/step_<N>/ atomically
// (see above); creates checkpoints_root if needed. An existing directory of
// that step is replaced only after the new one is complete.
Status WriteCheckpoint(const std::string& checkpoints_root, int64_t step,
                       const CheckpointContents& contents);

// Deletes all but the newest `keep` complete step_* directories under
// checkpoints_root, and any stale .tmp-* directories (not this process's).
// The caller verifies the newest one first (VerifyCheckpoint): older ones go
// only once a newer one is known good.
Status PruneCheckpoints(const std::string& checkpoints_root, int64_t keep);

// The manifest.json of a checkpoint directory, parsed (NotFound without one:
// the checkpoint is incomplete; DataLoss if it is not a JSON object).
Result<nlohmann::json> ReadManifest(const std::string& dir);

// Checks manifest.json parses and every file it lists exists with its size.
// Cheap: no file is read.
Status ValidateCheckpoint(const std::string& dir);
// ValidateCheckpoint, and every file's SHA-256 equals the manifest's. A
// mismatch is DataLoss naming the file and saying its checksum failed.
Status VerifyCheckpoint(const std::string& dir);
// The SHA-256 of dir/name against the manifest's (no-op for a checkpoint
// from before checksums). For readers that open one file of a checkpoint.
Status VerifyCheckpointFile(const std::string& dir, const nlohmann::json& manifest,
                            const std::string& name);

// `path` is a checkpoint directory (has manifest.json: validated and
// returned; its checksums are verified when its files are read) or a run
// directory: the newest checkpoint under path/checkpoints that is complete
// and verified (VerifyCheckpoint) is returned; damaged newer ones are
// skipped with a warning on stderr naming each. NotFound with a clear
// message otherwise.
Result<std::string> ResolveCheckpoint(const std::string& path);
// Whether the run directory has any checkpoint directory (complete or not).
bool HasCheckpoints(const std::string& run_dir);

// A whole-tensor checkpoint, its files' checksums verified.
struct LoadedCheckpoint {
  std::string dir;
  nlohmann::json manifest;
  std::unique_ptr<SafetensorsFile> model;
  std::unique_ptr<SafetensorsFile> optimizer;  // null if the file is absent
};
Result<LoadedCheckpoint> ReadCheckpoint(const std::string& dir);

}  // namespace scaletrain

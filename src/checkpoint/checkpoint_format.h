// The trainer's sharded checkpoint format (manifest "version": 2), and one
// reader for it and for the older whole-tensor format (version 1).
//
// Sharded: every rank writes its own file, shard-<world rank>.safetensors,
// with no gathering: the parameters and both AdamW moments of the parts of
// its flat buffers it writes (ShardPieces), each part as its own tensor
// named "<tensor>[begin:end]" (moments prefixed "exp_avg." / "exp_avg_sq.").
// The lead writes manifest.json last (checkpoint/checkpoint_dir.h: its presence
// marks the checkpoint complete) with every file's size and SHA-256 and the
// "tensors" table: for each tensor, its shape as the writing run held it,
// how tensor parallelism split it, and where each piece is:
//   "tensors": {"transformer.h.0.attn.c_attn.weight":
//       {"shape": [96, 32], "split": "column", "parts": 3, "tp": 2,
//        "pieces": [{"file": "shard-00000.safetensors", "tp_rank": 0,
//                    "begin": 0, "end": 1536}, ...]}, ...}
// A piece is elements [begin, end) of the flattened TP shard `tp_rank` of
// the tensor (ExtractShard's order). Any layout reads a checkpoint by
// assembling whole tensors from the pieces and taking its own shards.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "checkpoint/checkpoint_dir.h"
#include "checkpoint/safetensors.h"
#include "core/config.h"
#include "core/status.h"
#include "model/param_layout.h"
#include "model/spec.h"
#include "parallel/mesh.h"

namespace scaletrain {

inline constexpr int kShardedCheckpointVersion = 2;

// Elements [begin, end) of the flattened TP shard `tp_rank` of `tensor`.
struct CheckpointPiece {
  std::string tensor;
  int64_t tp_rank = 0;
  int64_t begin = 0, end = 0;
  int64_t flat = 0;  // where it starts in the writing rank's flat buffer
  int64_t block =
      0;  // where it starts in the rank's block ranges laid end to end (ZeRO's compact state)
  int64_t size() const { return end - begin; }
};

// What the rank at `coord` writes: of the entries it holds uniquely (its
// BuildRankLayout; not TP-replicated copies on tp ranks > 0, not the last
// stage's tied copy), the parts inside block dp of each of its gradient
// buckets (DpBlockRanges: the ZeRO partition, whatever parallel.zero is).
// Over all ranks every element of every tensor is written exactly once.
// `run_spec` is the model as the ranks hold it (vocabulary padded for tp).
std::vector<CheckpointPiece> ShardPieces(const ModelSpec& run_spec, const ParallelConfig& par,
                                         const MeshCoord& coord);

std::string ShardFileName(int64_t world_rank);  // "shard-00003.safetensors"
std::string PieceTensorName(const std::string& prefix, const CheckpointPiece& piece);

// A rank's part of one checkpoint, copied out of the training state: what a
// background thread writes while training goes on.
struct ShardSnapshot {
  std::vector<CheckpointPiece> pieces;
  std::vector<float> params, exp_avg,
      exp_avg_sq;  // the pieces' values back to back, in piece order
};
// Writes the snapshot as a safetensors file at `path` (atomically), then
// reads it back: the SHA-256 of what was written must equal that of the
// bytes meant (else DataLoss: the disk lost them). Returns the file's size
// and SHA-256, verified.
Result<FileDigest> WriteShardFile(const std::string& path, const ShardSnapshot& snapshot);

// The manifest's "tensors" table for a run of this spec and layout.
nlohmann::json ShardedTensorTable(const ModelSpec& run_spec, const ParallelConfig& par);

// Reads a checkpoint of either format as whole tensors. Each file's SHA-256
// is verified against the manifest when the reader first opens it.
class CheckpointReader {
 public:
  static Result<std::unique_ptr<CheckpointReader>> Open(const std::string& dir);

  const std::string& dir() const { return dir_; }
  const nlohmann::json& manifest() const { return manifest_; }
  // The model the checkpoint stores (its "model" entry).
  const ModelSpec& spec() const { return spec_; }
  bool has_optimizer() const;
  // Writes tensor prefix + entry.name, whole, in the shape of `entry` (an
  // entry of BuildParamLayout(spec())) into dst. prefix: "", "exp_avg." or
  // "exp_avg_sq.". A missing tensor, piece or file, a shape of another model,
  // a failed checksum: one error naming the file or tensor.
  Status ReadWhole(const std::string& prefix, const ParamEntry& entry, float* dst);

 private:
  CheckpointReader() = default;
  Result<const SafetensorsFile*> File(const std::string& name);
  Status ReadWholeTensorFormat(const std::string& prefix, const ParamEntry& entry, float* dst);
  Status ReadShardedFormat(const std::string& prefix, const ParamEntry& entry, float* dst);
  // Version 2: TP rank r's pieces of manifest tensor entry `t` (each one
  // ReadPiece, into shard_), inserted into whole_; returns the elements they
  // held, which the caller sums to find a tensor the pieces do not cover.
  Result<int64_t> ReadTpShard(const std::string& prefix, const std::string& name,
                              const nlohmann::json& t, int64_t r, const std::string& where);
  Status ReadPiece(const std::string& prefix, const std::string& file_name,
                   const CheckpointPiece& p);

  std::string dir_;
  nlohmann::json manifest_;
  ModelSpec spec_;
  int64_t version_ = 1;
  std::map<std::string, std::unique_ptr<SafetensorsFile>> files_;  // opened and verified
  std::vector<float> whole_, shard_;                               // assembly scratch
};

}  // namespace scaletrain

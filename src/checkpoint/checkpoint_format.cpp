#include "checkpoint/checkpoint_format.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <optional>

#include "checkpoint/checkpoint_dir.h"
#include "checkpoint/model_io.h"
#include "core/sha256.h"
#include "parallel/data_parallel.h"
#include "parallel/dp_layout.h"

namespace fs = std::filesystem;

namespace scaletrain {

namespace {

ModelShard ShardOf(const ParallelConfig& par, const MeshCoord& c) {
  return ModelShard{par.tp, c.tp, par.pp, c.pp, par.vpp, par.sp && par.tp > 1, par.chunks_in_v()};
}

int64_t BucketBytes(const ParallelConfig& par) {
  return static_cast<int64_t>(par.bucket_mb * 1048576.0);
}

// A TP shard's geometry from the manifest's description of a tensor.
Result<ParamEntry> ShardEntry(const std::string& name, const nlohmann::json& t, int64_t tp_rank) {
  ParamEntry e;
  e.name = name;
  try {
    e.full_shape = t.at("shape").get<Shape>();
    const std::string split = t.at("split").get<std::string>();
    e.shard_parts = t.at("parts").get<int64_t>();
    e.tp = t.at("tp").get<int64_t>();
    e.shard_dim = split == "replicated" ? -1 : split == "row" ? 1 : 0;
  } catch (const nlohmann::json::exception& ex) {
    return DataLoss("the manifest's entry for tensor '" + name + "' is malformed: " + ex.what());
  }
  e.tp_rank = tp_rank;
  e.shape = e.full_shape;
  const bool sane =
      e.tp >= 1 && e.shard_parts >= 1 && !e.full_shape.empty() &&
      e.shard_dim < static_cast<int64_t>(e.full_shape.size()) &&
      std::all_of(e.full_shape.begin(), e.full_shape.end(), [](int64_t d) { return d > 0; });
  if (!sane || (e.shard_dim >= 0 && e.full_shape[e.shard_dim] % (e.tp * e.shard_parts) != 0)) {
    return DataLoss("the manifest's entry for tensor '" + name +
                    "' has an impossible shape or split");
  }
  if (e.shard_dim >= 0) e.shape[e.shard_dim] /= e.tp;
  e.numel = NumElements(e.shape);
  return e;
}

}  // namespace

std::vector<CheckpointPiece> ShardPieces(const ModelSpec& run_spec, const ParallelConfig& par,
                                         const MeshCoord& coord) {
  const ParamLayout layout = BuildRankLayout(run_spec, ShardOf(par, coord));
  // The gradient group's blocks: dp x cp ranks hold each model shard.
  const int64_t ranks = par.dp * par.cp, index = coord.dp * par.cp + coord.cp;
  const std::vector<GradBucket> buckets =
      BuildDpBuckets(layout, ranks, BucketBytes(par), par.zero, run_spec.n_layer);
  std::vector<CheckpointPiece> pieces;
  int64_t block = 0;
  for (const FlatRange& r : DpBlockRanges(buckets, ranks, index)) {
    for (const ParamEntry& e : layout.entries) {
      if (!e.unique) continue;
      const int64_t lo = std::max(r.begin, e.offset), hi = std::min(r.end, e.offset + e.numel);
      if (lo >= hi) continue;
      CheckpointPiece p;
      p.tensor = e.name;
      p.tp_rank = e.shard_dim < 0 ? 0 : e.tp_rank;
      p.begin = lo - e.offset;
      p.end = hi - e.offset;
      p.flat = lo;
      p.block = block + (lo - r.begin);
      pieces.push_back(std::move(p));
    }
    block += r.size();
  }
  return pieces;
}

std::string ShardFileName(int64_t world_rank) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "shard-%05lld.safetensors", static_cast<long long>(world_rank));
  return buf;
}

std::string PieceTensorName(const std::string& prefix, const CheckpointPiece& p) {
  return prefix + p.tensor + "[" + std::to_string(p.begin) + ":" + std::to_string(p.end) + "]";
}

Result<FileDigest> WriteShardFile(const std::string& path, const ShardSnapshot& s) {
  std::vector<NamedTensor> tensors;
  tensors.reserve(3 * s.pieces.size());
  for (const auto& [prefix, values] :
       {std::pair<const char*, const std::vector<float>*>{"", &s.params},
        {"exp_avg.", &s.exp_avg},
        {"exp_avg_sq.", &s.exp_avg_sq}}) {
    int64_t at = 0;
    for (const CheckpointPiece& p : s.pieces) {
      tensors.push_back({PieceTensorName(prefix, p), DType::kF32, {p.size()}, values->data() + at});
      at += p.size();
    }
  }
  Sha256 meant;
  ST_RETURN_IF_ERROR(WriteSafetensors(path, tensors, {}, &meant));
  FileDigest d;
  d.name = fs::path(path).filename().string();
  d.sha256 = meant.HexDigest();
  ST_ASSIGN_OR_RETURN(const std::string on_disk, Sha256OfFile(path));
  if (on_disk != d.sha256) {
    return DataLoss(path + " reads back differently than it was written (sha256 " + on_disk +
                    ", written " + d.sha256 +
                    "): the disk lost data; check it, or write checkpoints elsewhere");
  }
  std::error_code ec;
  d.bytes = static_cast<uint64_t>(fs::file_size(path, ec));
  if (ec) return IoError("cannot stat " + path + ": " + ec.message());
  return d;
}

nlohmann::json ShardedTensorTable(const ModelSpec& run_spec, const ParallelConfig& par) {
  nlohmann::json table = nlohmann::json::object();
  const Result<Mesh> mesh = Mesh::FromConfig(par);
  if (!mesh.ok()) return table;
  for (int64_t w = 0; w < mesh->world_size(); ++w) {
    const MeshCoord coord = mesh->Coord(w);
    const ParamLayout layout = BuildRankLayout(run_spec, ShardOf(par, coord));
    for (const CheckpointPiece& p : ShardPieces(run_spec, par, coord)) {
      nlohmann::json& t = table[p.tensor];
      if (t.is_null()) {
        const ParamEntry* e = layout.Find(p.tensor);
        t = {{"shape", e->full_shape},
             {"split", TpSplitName(e->tp_split)},
             {"parts", e->shard_parts},
             {"tp", e->shard_dim < 0 ? 1 : par.tp},
             {"pieces", nlohmann::json::array()}};
      }
      t["pieces"].push_back(
          {{"file", ShardFileName(w)}, {"tp_rank", p.tp_rank}, {"begin", p.begin}, {"end", p.end}});
    }
  }
  return table;
}

Result<std::unique_ptr<CheckpointReader>> CheckpointReader::Open(const std::string& dir) {
  std::unique_ptr<CheckpointReader> r(new CheckpointReader());
  r->dir_ = dir;
  ST_RETURN_IF_ERROR(ValidateCheckpoint(dir));
  ST_ASSIGN_OR_RETURN(r->manifest_, ReadManifest(dir));
  const std::string manifest_path = (fs::path(dir) / "manifest.json").string();
  if (!r->manifest_.contains("model")) {
    return DataLoss(manifest_path + " has no model description; it is not a scaletrain checkpoint");
  }
  ST_ASSIGN_OR_RETURN(r->spec_, SpecFromJson(r->manifest_.at("model")));
  const auto version = r->manifest_.find("version");
  r->version_ =
      version != r->manifest_.end() && version->is_number_integer() ? version->get<int64_t>() : 1;
  if (r->version_ != 1 && r->version_ != kShardedCheckpointVersion) {
    return FailedPrecondition(manifest_path + " is format version " + std::to_string(r->version_) +
                              "; this scaletrain reads versions 1 and 2: use a newer scaletrain");
  }
  if (r->version_ == kShardedCheckpointVersion &&
      !r->manifest_.value("tensors", nlohmann::json()).is_object()) {
    return DataLoss(
        manifest_path +
        " has no \"tensors\" table; the checkpoint is corrupt; use an older checkpoint");
  }
  return r;
}

bool CheckpointReader::has_optimizer() const {
  if (version_ == kShardedCheckpointVersion) return true;  // every shard file holds both moments
  return manifest_.at("files").contains("optimizer.safetensors");
}

Result<const SafetensorsFile*> CheckpointReader::File(const std::string& name) {
  auto it = files_.find(name);
  if (it != files_.end()) return static_cast<const SafetensorsFile*>(it->second.get());
  ST_RETURN_IF_ERROR(VerifyCheckpointFile(dir_, manifest_, name));
  ST_ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsFile> f,
                      SafetensorsFile::Open((fs::path(dir_) / name).string()));
  return static_cast<const SafetensorsFile*>((files_[name] = std::move(f)).get());
}

Status CheckpointReader::ReadWhole(const std::string& prefix, const ParamEntry& entry, float* dst) {
  if (version_ == kShardedCheckpointVersion) return ReadShardedFormat(prefix, entry, dst);
  return ReadWholeTensorFormat(prefix, entry, dst);
}

Status CheckpointReader::ReadWholeTensorFormat(const std::string& prefix, const ParamEntry& entry,
                                               float* dst) {
  ST_ASSIGN_OR_RETURN(const SafetensorsFile* file,
                      File(prefix.empty() ? "model.safetensors" : "optimizer.safetensors"));
  const std::string name = prefix + entry.name;
  const NamedTensor* t = file->Find(name);
  if (!t) {
    return FailedPrecondition(
        "'" + file->path() + "' has no tensor '" + name +
        "': it was written for a different model; use the config it was trained with");
  }
  if (t->dtype != DType::kF32 || t->shape != entry.shape) {
    return FailedPrecondition("'" + file->path() + "': tensor '" + name + "' is " +
                              std::string(DTypeName(t->dtype)) + " " + ShapeToString(t->shape) +
                              ", this model expects F32 " + ShapeToString(entry.shape) +
                              "; use the config the checkpoint was trained with");
  }
  std::memcpy(dst, t->data, static_cast<size_t>(entry.numel) * sizeof(float));
  return Status::Ok();
}

namespace {

// The manifest's table entry of a tensor, with its list of pieces.
Result<const nlohmann::json*> ManifestTensor(const nlohmann::json& tensors, const std::string& name,
                                             const std::string& where) {
  if (!tensors.contains(name)) {
    return FailedPrecondition(
        where +
        " is not in the manifest: the checkpoint is of a different model; use the "
        "config it was trained with");
  }
  const nlohmann::json& t = tensors.at(name);
  if (!t.is_object() || !t.contains("pieces") || !t["pieces"].is_array()) {
    return DataLoss(where +
                    " has no list of pieces in the manifest; the checkpoint is corrupt; use an "
                    "older checkpoint");
  }
  return &t;
}

// The writing run's whole shape against this model's: the same but for the
// vocabulary rows, which the writing run may have padded further (for its tp).
Status CheckWrittenShape(const Shape& run_shape, const Shape& shape, const std::string& where) {
  if (run_shape.size() != shape.size() ||
      !std::equal(run_shape.begin() + 1, run_shape.end(), shape.begin() + 1) ||
      run_shape[0] < shape[0] || run_shape[0] > shape[0] + (int64_t{1} << 20)) {
    return FailedPrecondition(where + " is " + ShapeToString(run_shape) + ", this model expects " +
                              ShapeToString(shape) +
                              "; use the config the checkpoint was trained with");
  }
  return Status::Ok();
}

// A manifest piece and the shard file it is in.
struct ManifestPiece {
  CheckpointPiece piece;
  std::string file;
};

// The piece `pj` lists if it is of TP rank r (nullopt if of another), its
// range checked against the rank's shard of shard_numel elements.
Result<std::optional<ManifestPiece>> PieceOfTpRank(const nlohmann::json& pj,
                                                   const std::string& name, int64_t r,
                                                   int64_t shard_numel, const std::string& where) {
  ManifestPiece mp;
  CheckpointPiece& p = mp.piece;
  try {
    if (pj.at("tp_rank").get<int64_t>() != r) return std::optional<ManifestPiece>();
    mp.file = pj.at("file").get<std::string>();
    p = {name, r, pj.at("begin").get<int64_t>(), pj.at("end").get<int64_t>()};
  } catch (const nlohmann::json::exception& ex) {
    return DataLoss(where + ": a piece in the manifest is malformed: " + ex.what());
  }
  if (p.begin < 0 || p.end > shard_numel || p.begin >= p.end) {
    return DataLoss(where + ": a piece's range [" + std::to_string(p.begin) + ", " +
                    std::to_string(p.end) + ") lies outside the tensor; the checkpoint is corrupt");
  }
  return std::optional<ManifestPiece>(std::move(mp));
}

}  // namespace

Status CheckpointReader::ReadPiece(const std::string& prefix, const std::string& file_name,
                                   const CheckpointPiece& p) {
  ST_ASSIGN_OR_RETURN(const SafetensorsFile* file, File(file_name));
  const NamedTensor* piece = file->Find(PieceTensorName(prefix, p));
  if (piece == nullptr || piece->dtype != DType::kF32 || NumElements(piece->shape) != p.size()) {
    return DataLoss(file->path() + " lacks tensor " + PieceTensorName(prefix, p) + " (F32, " +
                    std::to_string(p.size()) +
                    " elements) that the manifest lists; the "
                    "checkpoint is corrupt; use an older checkpoint");
  }
  std::memcpy(shard_.data() + p.begin, piece->data, static_cast<size_t>(p.size()) * sizeof(float));
  return Status::Ok();
}

Result<int64_t> CheckpointReader::ReadTpShard(const std::string& prefix, const std::string& name,
                                              const nlohmann::json& t, int64_t r,
                                              const std::string& where) {
  ST_ASSIGN_OR_RETURN(ParamEntry shard_entry, ShardEntry(name, t, r));
  shard_.assign(static_cast<size_t>(shard_entry.numel), 0.0f);
  int64_t covered = 0;
  for (const nlohmann::json& pj : t.at("pieces")) {
    ST_ASSIGN_OR_RETURN(const std::optional<ManifestPiece> mp,
                        PieceOfTpRank(pj, name, r, shard_entry.numel, where));
    if (!mp) continue;
    ST_RETURN_IF_ERROR(ReadPiece(prefix, mp->file, mp->piece));
    covered += mp->piece.size();
  }
  InsertShard(shard_entry, shard_.data(), whole_.data());
  return covered;
}

Status CheckpointReader::ReadShardedFormat(const std::string& prefix, const ParamEntry& entry,
                                           float* dst) {
  const std::string where = "checkpoint " + dir_ + ": tensor '" + prefix + entry.name + "'";
  ST_ASSIGN_OR_RETURN(const nlohmann::json* t,
                      ManifestTensor(manifest_.at("tensors"), entry.name, where));
  ST_ASSIGN_OR_RETURN(ParamEntry whole_entry, ShardEntry(entry.name, *t, 0));
  const Shape& run_shape = whole_entry.full_shape;
  ST_RETURN_IF_ERROR(CheckWrittenShape(run_shape, entry.shape, where));
  whole_.assign(static_cast<size_t>(NumElements(run_shape)), 0.0f);
  int64_t covered = 0;
  for (int64_t r = 0; r < whole_entry.tp; ++r) {
    ST_ASSIGN_OR_RETURN(const int64_t of_rank, ReadTpShard(prefix, entry.name, *t, r, where));
    covered += of_rank;
  }
  if (covered != NumElements(run_shape)) {
    return DataLoss(where + ": its pieces hold " + std::to_string(covered) + " of its " +
                    std::to_string(NumElements(run_shape)) +
                    " elements; the checkpoint is corrupt");
  }
  CopyCommonRows(whole_.data(), run_shape, dst, entry.shape);
  return Status::Ok();
}

}  // namespace scaletrain

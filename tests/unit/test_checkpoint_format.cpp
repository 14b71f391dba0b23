// The sharded checkpoint format (checkpoint/checkpoint_format.h) without a
// trainer: for several dp x tp x pp layouts the ranks' pieces cover every
// element of every tensor exactly once, and a checkpoint written as the
// ranks of one layout write it reads back, through CheckpointReader, as the
// whole tensors it was made from (the trainer's resharding rests on that).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>

#include "checkpoint/checkpoint_dir.h"
#include "checkpoint/checkpoint_format.h"
#include "checkpoint/model_io.h"
#include "model/spec.h"
#include "parallel/mesh.h"

namespace scaletrain {
namespace {

namespace fs = std::filesystem;

struct Layout {
  int64_t dp, tp, pp, vpp;
  double bucket_mb;
};

ParallelConfig Par(const Layout& l) {
  ParallelConfig p;
  p.dp = l.dp;
  p.tp = l.tp;
  p.pp = l.pp;
  p.vpp = l.vpp;
  p.schedule = l.vpp > 1 ? "interleaved" : "1f1b";
  p.bucket_mb = l.bucket_mb;
  return p;
}

// A checkpoint's model (vocabulary 50, not a multiple of 4) and the model as
// the ranks of a tp-way layout hold it.
ModelSpec CheckpointSpec() {
  ModelConfig c;
  c.n_layer = 4;
  c.n_head = 4;
  c.n_embd = 16;
  c.block_size = 8;
  return *ModelSpecFromConfig(c, 50, 1);
}
ModelSpec RunSpec(int64_t tp) {
  ModelSpec s = CheckpointSpec();
  s.padded_vocab_size = PaddedVocabSize(s.vocab_size, 1, tp);
  return s;
}

const std::vector<Layout> kLayouts = {
    {1, 1, 1, 1, 25},    {2, 1, 1, 1, 0.002}, {4, 1, 1, 1, 0.001},
    {1, 2, 1, 1, 25},    {1, 4, 1, 1, 25},    {1, 1, 2, 1, 25},
    {2, 2, 2, 1, 0.002}, {1, 1, 2, 2, 25},    {2, 2, 2, 2, 0.001}};

TEST(ShardedCheckpoint, PiecesCoverEveryElementExactlyOnce) {
  for (const Layout& l : kLayouts) {
    const ParallelConfig par = Par(l);
    const ModelSpec spec = RunSpec(l.tp);
    const nlohmann::json table = ShardedTensorTable(spec, par);
    const ParamLayout whole = BuildParamLayout(spec);
    ASSERT_EQ(table.size(), whole.entries.size())
        << "dp " << l.dp << " tp " << l.tp << " pp " << l.pp;
    for (const ParamEntry& e : whole.entries) {
      const nlohmann::json& t = table.at(e.name);
      EXPECT_EQ(t["shape"].get<Shape>(), e.shape) << e.name;
      const int64_t tp = t["tp"].get<int64_t>();
      std::map<int64_t, std::vector<std::pair<int64_t, int64_t>>> by_rank;
      for (const auto& p : t["pieces"]) by_rank[p["tp_rank"]].push_back({p["begin"], p["end"]});
      ASSERT_EQ(static_cast<int64_t>(by_rank.size()), tp) << e.name;
      for (auto& [r, ranges] : by_rank) {
        std::sort(ranges.begin(), ranges.end());
        int64_t at = 0;
        for (const auto& [b, end] : ranges) {
          EXPECT_EQ(b, at) << e.name << " tp_rank " << r << ": a gap or an overlap";
          at = end;
        }
        EXPECT_EQ(at, e.numel / tp) << e.name << " tp_rank " << r;
      }
    }
  }
}

// Each element of the whole model gets a value of its own; the moments are
// the parameters times 2 and times 3.
float Value(size_t tensor, int64_t i) {
  return static_cast<float>(tensor) * 1000.0f + 0.5f * static_cast<float>(i);
}

// Writes checkpoint `step` of the model as the ranks of layout `l` would.
std::string WriteAsRanks(const fs::path& run, const Layout& l, int64_t step) {
  const ParallelConfig par = Par(l);
  const ModelSpec spec = RunSpec(l.tp), ckpt_spec = CheckpointSpec();
  const ParamLayout ckpt_layout = BuildParamLayout(ckpt_spec);
  const Mesh mesh = *Mesh::FromConfig(par);
  const std::string root = (run / "checkpoints").string();
  auto tmp = BeginCheckpointDir(root, step, std::to_string(::getpid()));
  EXPECT_TRUE(tmp.ok()) << tmp.status().message();
  std::vector<FileDigest> files;
  for (int64_t w = 0; w < mesh.world_size(); ++w) {
    const MeshCoord c = mesh.Coord(w);
    const ParamLayout rank =
        BuildRankLayout(spec, ModelShard{l.tp, c.tp, l.pp, c.pp, l.vpp, false});
    std::vector<float> flat(static_cast<size_t>(rank.total_numel + l.dp), 0.0f);
    for (const ParamEntry& e : rank.entries) {
      size_t index = 0;
      while (ckpt_layout.entries[index].name != e.name) ++index;
      const ParamEntry& ce = ckpt_layout.entries[index];
      std::vector<float> whole(static_cast<size_t>(ce.numel)),
          padded(static_cast<size_t>(NumElements(e.full_shape)));
      for (int64_t i = 0; i < ce.numel; ++i) whole[static_cast<size_t>(i)] = Value(index, i);
      CopyCommonRows(whole.data(), ce.shape, padded.data(), e.full_shape);
      ExtractShard(e, padded.data(), flat.data() + e.offset);
    }
    ShardSnapshot s;
    s.pieces = ShardPieces(spec, par, c);
    for (const CheckpointPiece& p : s.pieces) {
      for (int64_t i = p.flat; i < p.flat + p.size(); ++i) {
        s.params.push_back(flat[static_cast<size_t>(i)]);
        s.exp_avg.push_back(2 * flat[static_cast<size_t>(i)]);
        s.exp_avg_sq.push_back(3 * flat[static_cast<size_t>(i)]);
      }
    }
    EXPECT_TRUE(WriteShardFile((fs::path(*tmp) / ShardFileName(w)).string(), s).ok());
    auto d = DigestFile(*tmp, ShardFileName(w));
    EXPECT_TRUE(d.ok());
    files.push_back(*d);
  }
  const nlohmann::json manifest = {{"version", kShardedCheckpointVersion},
                                   {"step", step},
                                   {"model", SpecToJson(ckpt_spec)},
                                   {"tensors", ShardedTensorTable(spec, par)}};
  EXPECT_TRUE(CommitCheckpointDir(*tmp, root, step, manifest, files).ok());
  return (fs::path(root) / CheckpointDirName(step)).string();
}

class TempRun {
 public:
  TempRun() : path_(fs::temp_directory_path() / ("st_ckfmt_" + std::to_string(::getpid()))) {
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempRun() { fs::remove_all(path_); }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

TEST(ShardedCheckpoint, EveryLayoutReadsBackAsTheWholeModel) {
  const ParamLayout ckpt_layout = BuildParamLayout(CheckpointSpec());
  for (const Layout& l : kLayouts) {
    TempRun run;
    const std::string dir = WriteAsRanks(run.path(), l, 7);
    ASSERT_TRUE(VerifyCheckpoint(dir).ok());
    auto reader = CheckpointReader::Open(dir);
    ASSERT_TRUE(reader.ok()) << reader.status().message();
    EXPECT_TRUE((*reader)->has_optimizer());
    for (size_t t = 0; t < ckpt_layout.entries.size(); ++t) {
      const ParamEntry& e = ckpt_layout.entries[t];
      for (const auto& [prefix, scale] :
           {std::pair<const char*, float>{"", 1.0f}, {"exp_avg.", 2.0f}, {"exp_avg_sq.", 3.0f}}) {
        std::vector<float> got(static_cast<size_t>(e.numel), -1.0f);
        Status st = (*reader)->ReadWhole(prefix, e, got.data());
        ASSERT_TRUE(st.ok()) << st.message();
        int64_t wrong = 0;
        for (int64_t i = 0; i < e.numel; ++i)
          wrong += got[static_cast<size_t>(i)] != scale * Value(t, i);
        EXPECT_EQ(wrong, 0) << prefix << e.name << " at dp " << l.dp << " tp " << l.tp << " pp "
                            << l.pp << " vpp " << l.vpp;
      }
    }
  }
}

TEST(ShardedCheckpoint, DamagedShardFailsItsChecksumWhenRead) {
  TempRun run;
  const std::string dir = WriteAsRanks(run.path(), {2, 2, 1, 1, 25}, 3);
  const fs::path shard = fs::path(dir) / ShardFileName(3);
  {
    std::fstream f(shard, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(fs::file_size(shard) - 1));
    f.put('\x7f');
  }
  auto reader = CheckpointReader::Open(dir);
  ASSERT_TRUE(reader.ok()) << reader.status().message();  // sizes are right: opening is cheap
  const ParamLayout ckpt_layout = BuildParamLayout(CheckpointSpec());
  Status first_failure;
  for (const ParamEntry& e : ckpt_layout.entries) {
    std::vector<float> got(static_cast<size_t>(e.numel));
    Status st = (*reader)->ReadWhole("", e, got.data());
    if (!st.ok()) {
      first_failure = st;
      break;
    }
  }
  ASSERT_FALSE(first_failure.ok()) << "no tensor read touched the damaged shard";
  EXPECT_NE(first_failure.message().find(shard.string()), std::string::npos)
      << first_failure.message();
  EXPECT_NE(first_failure.message().find("checksum failed"), std::string::npos)
      << first_failure.message();
}

TEST(ShardedCheckpoint, CheckpointWithoutItsManifestIsNeverLoaded) {
  TempRun run;
  const std::string dir = WriteAsRanks(run.path(), {1, 2, 1, 1, 25}, 5);
  fs::remove(fs::path(dir) / "manifest.json");
  auto reader = CheckpointReader::Open(dir);
  ASSERT_FALSE(reader.ok());
  EXPECT_NE(reader.status().message().find("no manifest.json"), std::string::npos)
      << reader.status().message();
  EXPECT_FALSE(ResolveCheckpoint(run.path().string()).ok());
}

// The manifest's table of pieces is what the reader trusts to assemble a
// tensor: one that does not add up to its shard files is one error naming
// the tensor, never a tensor read in part.
TEST(ShardedCheckpoint, PiecesThatDoNotMatchTheShardsAreOneErrorNamingTheTensor) {
  const ParamLayout ckpt_layout = BuildParamLayout(CheckpointSpec());
  const ParamEntry& e = *ckpt_layout.Find("transformer.h.0.attn.c_attn.weight");
  struct Edit {
    const char* what;
    std::function<void(nlohmann::json& tensors)> apply;
    const char* message;
  };
  const std::vector<Edit> edits = {
      {"tensor left out", [&](nlohmann::json& t) { t.erase(e.name); }, "is not in the manifest"},
      {"pieces left out", [&](nlohmann::json& t) { t[e.name].erase("pieces"); },
       "has no list of pieces"},
      {"piece without its file", [&](nlohmann::json& t) { t[e.name]["pieces"][1].erase("file"); },
       "a piece in the manifest is malformed"},
      {"piece past its shard", [&](nlohmann::json& t) { t[e.name]["pieces"][1]["end"] = 1 << 30; },
       "lies outside the tensor"},
      {"piece dropped", [&](nlohmann::json& t) { t[e.name]["pieces"].erase(1); },
       "elements; the checkpoint is corrupt"},
  };
  for (const Edit& edit : edits) {
    TempRun run;
    const std::string dir = WriteAsRanks(run.path(), {1, 2, 1, 1, 25}, 4);
    const fs::path manifest_path = fs::path(dir) / "manifest.json";
    nlohmann::json manifest;
    std::ifstream(manifest_path) >> manifest;
    ASSERT_EQ(manifest["tensors"][e.name]["pieces"].size(), 2u) << "one piece per TP rank";
    edit.apply(manifest["tensors"]);
    std::ofstream(manifest_path) << manifest.dump();
    auto reader = CheckpointReader::Open(dir);
    ASSERT_TRUE(reader.ok()) << edit.what << ": " << reader.status().message();
    std::vector<float> got(static_cast<size_t>(e.numel));
    const Status st = (*reader)->ReadWhole("", e, got.data());
    ASSERT_FALSE(st.ok()) << edit.what;
    EXPECT_NE(st.message().find("tensor '" + e.name + "'"), std::string::npos) << st.message();
    EXPECT_NE(st.message().find(edit.message), std::string::npos)
        << edit.what << ": " << st.message();
  }
}

}  // namespace
}  // namespace scaletrain

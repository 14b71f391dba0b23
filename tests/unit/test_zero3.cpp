// ZeRO-3's arithmetic (PlanZero3, the gather policy, the per-pass counts the
// planner uses) and Zero3Params on one rank: every parameter the model reads
// through it after Acquire is the flat buffer's. The multi-rank behaviour
// (equal to one rank, bytes equal to the planner's) is in
// tests/cli/test_zero3.sh and test_plan_vs_trainer.sh.
#include <gtest/gtest.h>

#include <vector>

#include "comm/self_communicator.h"
#include "model/gpt.h"
#include "model/param_layout.h"
#include "parallel/dp_layout.h"
#include "parallel/zero3.h"

namespace scaletrain {
namespace {

TEST(Zero3Plan, BucketsTileTheBufferAtLayerBoundariesAndWindowsCoverEachLayer) {
  // Runs of 10 (embedding), 7, 7 (blocks) and 2 (head) elements at dp 4:
  // 26 padded to 28; boundaries 10, 17, 24 are cut at 8|12, 16|20, 24.
  const Zero3Layout z = PlanZero3({10, 7, 7, 2}, {true, false, false, true}, 4);
  std::vector<std::pair<int64_t, int64_t>> got;
  for (const GradBucket& b : z.buckets) got.push_back({b.begin, b.end});
  const std::vector<std::pair<int64_t, int64_t>> want = {{24, 28}, {20, 24}, {16, 20},
                                                         {12, 16}, {8, 12},  {0, 8}};
  EXPECT_EQ(got, want);  // launch order: last in the buffer first
  ASSERT_EQ(z.windows.size(), 4u);
  EXPECT_EQ(z.windows[0].begin, 0);
  EXPECT_EQ(z.windows[0].end, 12);
  EXPECT_EQ(z.windows[1].begin, 8);
  EXPECT_EQ(z.windows[1].end, 20);
  EXPECT_EQ(z.windows[3].begin, 24);
  EXPECT_EQ(z.windows[3].end, 28);
  EXPECT_EQ(z.window_buckets[1].size(), 3u);  // seam, its own bucket, seam
  ASSERT_EQ(z.units.size(), 3u);              // outer (runs 0 and 3), then each block
  EXPECT_EQ(z.units[0], (std::vector<size_t>{0, 3}));
  EXPECT_EQ(z.unit_of_run, (std::vector<int64_t>{0, 1, 2, 0}));
}

TEST(Zero3Plan, GatherPolicyPrefetchesAndRegathersWhatWasEvicted) {
  // Two buffers: with two blocks the outer unit is evicted before the head.
  EXPECT_EQ(Zero3GatheredUnits({0, 1, 2, 0}), (std::vector<int64_t>{0, 1, 2, 0}));
  // With one block it is still held.
  EXPECT_EQ(Zero3GatheredUnits({0, 1, 0}), (std::vector<int64_t>{0, 1}));
  const Zero3Layout z = PlanZero3({10, 7, 7, 2}, {true, false, false, true}, 4);
  const Zero3PassGathers g = Zero3GathersPerPass(z, false);
  // Forward: outer twice (windows of 12 and 4 elements: 2 + 1 buckets),
  // blocks once.
  EXPECT_EQ(g.numel, 2 * (12 + 4) + 12 + 8);
  EXPECT_EQ(g.calls, 2 * 3 + 3 + 2);
  // Backward: the head's (outer), the blocks; the embedding's backward reads
  // no parameters.
  EXPECT_EQ(Zero3PassUnits(z, true), (std::vector<int64_t>{0, 2, 1}));
  const Zero3PassGathers gb = Zero3GathersPerPass(z, true);
  EXPECT_EQ(gb.numel, (12 + 4) + 8 + 12);
  EXPECT_EQ(gb.calls, 3 + 2 + 3);
  const std::vector<StepCollective> cs =
      DataParallelStepCollectives(z.buckets, 4, 3, 2, 0, 4, 4, DpCompression::kNone, g, gb);
  EXPECT_EQ(PayloadBytes(cs), 2 * 28 * 4 + 8 + 2 * (g.numel + gb.numel) * 4 + 8);
}

TEST(Zero3Plan, ALastStagesTiedCopyIsGatheredWithItsHeadOnly) {
  // A pipeline's last stage: the tied embedding copy (not a layer of its
  // own), two blocks, the head. The passes acquire the blocks and the head.
  const Zero3Layout z =
      PlanZero3({12, 8, 8, 4}, {true, false, false, true}, 4, {false, true, true, true});
  EXPECT_EQ(Zero3PassUnits(z, false), (std::vector<int64_t>{1, 2, 0}));
  EXPECT_EQ(Zero3PassUnits(z, true), (std::vector<int64_t>{0, 2, 1}));
  EXPECT_EQ(z.units[0], (std::vector<size_t>{0, 3}));  // the copy comes with the head
  // Aligned boundaries: each block once, the outer unit (12 + 4) once.
  EXPECT_EQ(Zero3GathersPerPass(z, false).numel, 8 + 8 + 12 + 4);
  EXPECT_EQ(Zero3GathersPerPass(z, true).numel, 8 + 8 + 12 + 4);
}

TEST(Zero3Plan, ZbVChunksEachPassOverTheirOwnLayers) {
  // zb-v's first stage: embedding, block 0 (chunk 0), block 3 (chunk 1),
  // head. Chunk 0's forward acquires the outer unit and block 0, chunk 1's
  // block 3 and the outer unit again (for the head); nothing is prefetched
  // across the chunks.
  const Zero3Layout z = PlanZero3({12, 8, 8, 4}, {true, false, false, true}, 4);
  const std::vector<int64_t> run_chunk =
      Zero3RunChunks({kEmbeddingLayer, 0, 3, HeadLayer(4)}, {{kEmbeddingLayer, 0}, {3, 4}});
  EXPECT_EQ(run_chunk, (std::vector<int64_t>{0, 0, 1, 1}));
  EXPECT_EQ(Zero3PassUnits(z, false, run_chunk, 0), (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(Zero3PassUnits(z, false, run_chunk, 1), (std::vector<int64_t>{2, 0}));
  EXPECT_EQ(Zero3PassUnits(z, true, run_chunk, 1), (std::vector<int64_t>{0, 2}));
  EXPECT_EQ(Zero3PassUnits(z, true, run_chunk, 0), (std::vector<int64_t>{1}));
  // Forward: the outer unit (12 + 4) in each chunk's pass, each block once.
  EXPECT_EQ(Zero3GathersPerPass(z, false, run_chunk).numel, 2 * (12 + 4) + 8 + 8);
  EXPECT_EQ(Zero3GathersPerPass(z, true, run_chunk).numel, (12 + 4) + 8 + 8);
  // One chunk: the plain pass.
  EXPECT_EQ(Zero3GathersPerPass(z, false, {}).numel, Zero3GathersPerPass(z, false).numel);
}

ModelSpec TinySpec() {
  ModelSpec s;
  s.n_layer = 3;
  s.n_head = 2;
  s.n_kv_head = 2;
  s.n_embd = 6;
  s.ffn_hidden = 24;
  s.block_size = 4;
  s.vocab_size = 7;
  s.padded_vocab_size = 8;
  return s;
}

TEST(Zero3Params, AcquiredLayersReadTheirParameters) {
  const ModelSpec spec = TinySpec();
  const ParamLayout layout = BuildParamLayout(spec);
  std::vector<float> full(static_cast<size_t>(layout.total_numel));
  for (size_t i = 0; i < full.size(); ++i) full[i] = static_cast<float>(i) * 0.5f;
  auto comm = CreateSelfCommunicator("dp");
  Zero3Params z(layout, spec.n_layer, comm.get());
  z.LoadShard(full.data());
  EXPECT_EQ(z.shard_bytes(), layout.total_numel * 4);
  std::vector<int64_t> order = {kEmbeddingLayer, 0, 1, 2, HeadLayer(spec.n_layer)};
  for (bool backward : {false, true}) {
    if (backward) order = {HeadLayer(spec.n_layer), 2, 1, 0};  // as BackwardChunk
    for (int64_t layer : order) {
      ASSERT_TRUE(z.Acquire(layer, backward).ok());
      for (const ParamEntry& e : layout.entries) {
        const bool needed =
            e.layer == layer || (layer == HeadLayer(spec.n_layer) && e.layer == kEmbeddingLayer);
        if (!needed) continue;
        for (int64_t k = 0; k < e.numel; ++k)
          ASSERT_EQ(*z.At(e.offset + k), full[static_cast<size_t>(e.offset + k)]) << e.name;
      }
    }
    ASSERT_TRUE(z.Release().ok());
  }
}

}  // namespace
}  // namespace scaletrain

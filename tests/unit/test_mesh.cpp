// The mesh is checked against a layout computed a second way (nested loops
// in rank order) and against the properties a layout must have: every axis
// partitions the world, and two ranks share a group iff they agree on the
// other two coordinates.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "parallel/mesh.h"

namespace scaletrain {
namespace {

Mesh MustCreate(int64_t dp, int64_t tp, int64_t pp) {
  Result<Mesh> mesh = Mesh::Create(dp, tp, pp);
  EXPECT_TRUE(mesh.ok()) << mesh.status().message();
  return *mesh;
}

int64_t CoordOn(const MeshCoord& c, MeshAxis axis) {
  switch (axis) {
    case MeshAxis::kDp:
      return c.dp;
    case MeshAxis::kTp:
      return c.tp;
    case MeshAxis::kPp:
      return c.pp;
    case MeshAxis::kCp:
      return c.cp;
  }
  return -1;
}

// With context parallelism the order is tp-cp-dp-pp (Megatron's), and the
// gradient group joins the dp and cp ranks of one model shard.
TEST(MeshTest, ContextParallelSitsBetweenTpAndDp) {
  Result<Mesh> made = Mesh::Create(2, 2, 2, 2);
  ASSERT_TRUE(made.ok());
  const Mesh& mesh = *made;
  EXPECT_EQ(mesh.world_size(), 16);
  int64_t expected_rank = 0;
  for (int64_t pp = 0; pp < 2; ++pp)
    for (int64_t dp = 0; dp < 2; ++dp)
      for (int64_t cp = 0; cp < 2; ++cp)
        for (int64_t tp = 0; tp < 2; ++tp) {
          const MeshCoord c{dp, tp, pp, cp};
          EXPECT_EQ(mesh.RankOf(c), expected_rank);
          EXPECT_EQ(mesh.Coord(expected_rank), c);
          ++expected_rank;
        }
  // Rank 11 = (pp 1, dp 0, cp 1, tp 1).
  EXPECT_EQ(mesh.Coord(11), (MeshCoord{0, 1, 1, 1}));
  EXPECT_EQ(mesh.GroupMembers(MeshAxis::kCp, 11), (std::vector<int64_t>{9, 11}));
  EXPECT_EQ(mesh.GroupMembers(MeshAxis::kDp, 11), (std::vector<int64_t>{11, 15}));
  EXPECT_EQ(mesh.GroupMembers(MeshAxis::kTp, 11), (std::vector<int64_t>{10, 11}));
  EXPECT_EQ(mesh.GroupMembers(MeshAxis::kPp, 11), (std::vector<int64_t>{3, 11}));
  EXPECT_EQ(mesh.GradGroupMembers(11), (std::vector<int64_t>{9, 11, 13, 15}));
  EXPECT_EQ(mesh.GradGroupIndex(11), 1);
  EXPECT_EQ(mesh.GradGroupIndex(13), 2);
  // Every axis partitions the world, and so do the gradient groups.
  for (MeshAxis axis : kMeshAxes) {
    std::set<int64_t> seen;
    for (const auto& g : mesh.AllGroups(axis)) seen.insert(g.begin(), g.end());
    EXPECT_EQ(seen.size(), 16u) << MeshAxisName(axis);
  }
  std::set<int64_t> ids;
  for (int64_t r = 0; r < 16; ++r) {
    ids.insert(mesh.GradGroupId(r));
    EXPECT_EQ(mesh.GradGroupMembers(r)[mesh.GradGroupIndex(r)], r);
  }
  EXPECT_EQ(ids.size(), 4u);  // tp x pp groups
}

TEST(MeshTest, TpIsInnermostThenDpThenPp) {
  const Mesh mesh = MustCreate(2, 2, 2);
  // Enumerating pp, then dp, then tp, innermost last, must visit ranks 0..7.
  int64_t expected_rank = 0;
  for (int64_t pp = 0; pp < 2; ++pp) {
    for (int64_t dp = 0; dp < 2; ++dp) {
      for (int64_t tp = 0; tp < 2; ++tp) {
        const MeshCoord c{dp, tp, pp};
        EXPECT_EQ(mesh.RankOf(c), expected_rank);
        EXPECT_EQ(mesh.Coord(expected_rank), c);
        ++expected_rank;
      }
    }
  }
}

TEST(MeshTest, GroupsOfTwoByTwoByTwo) {
  const Mesh mesh = MustCreate(2, 2, 2);
  // Rank 5 = (pp 1, dp 0, tp 1).
  EXPECT_EQ(mesh.Coord(5), (MeshCoord{0, 1, 1}));
  EXPECT_EQ(mesh.GroupMembers(MeshAxis::kTp, 5), (std::vector<int64_t>{4, 5}));
  EXPECT_EQ(mesh.GroupMembers(MeshAxis::kDp, 5), (std::vector<int64_t>{5, 7}));
  EXPECT_EQ(mesh.GroupMembers(MeshAxis::kPp, 5), (std::vector<int64_t>{1, 5}));
  EXPECT_EQ(mesh.AllGroups(MeshAxis::kDp),
            (std::vector<std::vector<int64_t>>{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
  EXPECT_EQ(mesh.AllGroups(MeshAxis::kPp),
            (std::vector<std::vector<int64_t>>{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
}

TEST(MeshTest, PureDataParallelIsOneGroupOfAll) {
  const Mesh mesh = MustCreate(4, 1, 1);
  EXPECT_EQ(mesh.AllGroups(MeshAxis::kDp), (std::vector<std::vector<int64_t>>{{0, 1, 2, 3}}));
  EXPECT_EQ(mesh.NumGroups(MeshAxis::kTp), 4);
  for (int64_t r = 0; r < 4; ++r) {
    EXPECT_EQ(mesh.AxisIndex(MeshAxis::kDp, r), r);
    EXPECT_EQ(mesh.GroupMembers(MeshAxis::kTp, r), (std::vector<int64_t>{r}));
    EXPECT_EQ(mesh.GroupMembers(MeshAxis::kPp, r), (std::vector<int64_t>{r}));
  }
}

// Every layout of up to 16 ranks: coordinates are a bijection, and each
// axis's groups partition the world into groups of the axis size whose
// members agree on the other coordinates and are ordered by axis index.
TEST(MeshTest, EveryLayoutUpTo16Ranks) {
  int layouts = 0;
  for (int64_t world = 1; world <= 16; ++world) {
    for (int64_t dp = 1; dp <= world; ++dp) {
      for (int64_t tp = 1; dp * tp <= world; ++tp) {
        if (world % (dp * tp) != 0) continue;
        const int64_t pp = world / (dp * tp);
        SCOPED_TRACE("dp=" + std::to_string(dp) + " tp=" + std::to_string(tp) +
                     " pp=" + std::to_string(pp));
        const Mesh mesh = MustCreate(dp, tp, pp);
        ++layouts;
        ASSERT_EQ(mesh.world_size(), world);
        std::set<std::tuple<int64_t, int64_t, int64_t>> seen;
        for (int64_t r = 0; r < world; ++r) {
          const MeshCoord c = mesh.Coord(r);
          ASSERT_TRUE(c.dp >= 0 && c.dp < dp && c.tp >= 0 && c.tp < tp && c.pp >= 0 && c.pp < pp);
          EXPECT_EQ(mesh.RankOf(c), r);
          EXPECT_EQ(r, (c.pp * dp + c.dp) * tp + c.tp);
          seen.insert({c.dp, c.tp, c.pp});
        }
        EXPECT_EQ(static_cast<int64_t>(seen.size()), world);

        for (MeshAxis axis : kMeshAxes) {
          const auto groups = mesh.AllGroups(axis);
          ASSERT_EQ(static_cast<int64_t>(groups.size()), mesh.NumGroups(axis));
          std::vector<int> covered(world, 0);
          for (size_t g = 0; g < groups.size(); ++g) {
            ASSERT_EQ(static_cast<int64_t>(groups[g].size()), mesh.axis_size(axis));
            for (size_t i = 0; i < groups[g].size(); ++i) {
              const int64_t member = groups[g][i];
              ++covered[member];
              EXPECT_EQ(mesh.GroupId(axis, member), static_cast<int64_t>(g));
              EXPECT_EQ(mesh.AxisIndex(axis, member), static_cast<int64_t>(i));
              EXPECT_EQ(mesh.GroupMembers(axis, member), groups[g]);
            }
          }
          EXPECT_TRUE(std::all_of(covered.begin(), covered.end(), [](int n) { return n == 1; }));
          // Sharing a group on `axis` means agreeing on the two other axes.
          for (int64_t a = 0; a < world; ++a) {
            for (int64_t b = 0; b < world; ++b) {
              bool agree_elsewhere = true;
              for (MeshAxis other : kMeshAxes) {
                if (other != axis &&
                    CoordOn(mesh.Coord(a), other) != CoordOn(mesh.Coord(b), other)) {
                  agree_elsewhere = false;
                }
              }
              EXPECT_EQ(mesh.GroupId(axis, a) == mesh.GroupId(axis, b), agree_elsewhere);
            }
          }
        }
      }
    }
  }
  // Ordered factorisations of 1..16 into three factors: sum of d3(n).
  EXPECT_EQ(layouts, 1 + 3 + 3 + 6 + 3 + 9 + 3 + 10 + 6 + 9 + 3 + 18 + 3 + 9 + 9 + 15);
}

TEST(MeshTest, WorldSizeMismatchSaysHowToLaunch) {
  ParallelConfig parallel;
  parallel.dp = 2;
  Result<Mesh> mesh = Mesh::ForWorld(parallel, 3);
  ASSERT_FALSE(mesh.ok());
  EXPECT_EQ(mesh.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(mesh.status().message(),
            "world size 3 does not equal dp x tp x pp = 2 x 1 x 1 = 2; launch with mpirun -np 2 "
            "or change parallel.dp/tp/pp");

  parallel.tp = 2;
  parallel.pp = 2;
  Result<Mesh> ok = Mesh::ForWorld(parallel, 8);
  ASSERT_TRUE(ok.ok()) << ok.status().message();
  EXPECT_EQ(ok->ToString(), "dp=2 x tp=2 x pp=2");
}

TEST(MeshTest, SizesBelowOneAreRejectedByName) {
  Result<Mesh> mesh = Mesh::Create(1, 0, 1);
  ASSERT_FALSE(mesh.ok());
  EXPECT_EQ(mesh.status().message(), "parallel.tp must be at least 1, got 0");
  mesh = Mesh::Create(1, 1, -2);
  ASSERT_FALSE(mesh.ok());
  EXPECT_EQ(mesh.status().message(), "parallel.pp must be at least 1, got -2");
  mesh = Mesh::Create(1 << 20, 1 << 12, 1);
  ASSERT_FALSE(mesh.ok());
  EXPECT_NE(mesh.status().message().find("exceeds the largest MPI world"), std::string::npos);
}

}  // namespace
}  // namespace scaletrain

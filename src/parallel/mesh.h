// The parallel layout mesh: which data-, tensor- and pipeline-parallel
// position each rank holds, and which ranks share a group on each axis.
// Pure arithmetic, no MPI: the trainer builds its communicators from it and
// the planner reasons about the same layout with it.
//
// Rank order is Megatron's tp-cp-dp-pp: tensor parallel innermost, so the
// ranks of a TP group (the chattiest, an all-reduce per layer) are
// neighbours and land on one node, then context parallel (a ring transfer
// per layer); pipeline parallel outermost.
//
//   rank = ((pp_index * dp_size + dp_index) * cp_size + cp_index) * tp_size + tp_index
//
// The gradient reduction (and ZeRO's sharding) runs over the dp x cp ranks
// that hold the same model shard (GradGroup*): each holds different tokens.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/status.h"

namespace scaletrain {

enum class MeshAxis { kDp, kTp, kPp, kCp };
inline constexpr MeshAxis kMeshAxes[] = {MeshAxis::kDp, MeshAxis::kTp, MeshAxis::kPp, MeshAxis::kCp};
const char* MeshAxisName(MeshAxis axis);  // "dp", "tp", "pp", "cp"

struct MeshCoord {
  int64_t dp = 0;
  int64_t tp = 0;
  int64_t pp = 0;
  int64_t cp = 0;
  bool operator==(const MeshCoord&) const = default;
};

class Mesh {
 public:
  // Each size must be >= 1.
  static Result<Mesh> Create(int64_t dp, int64_t tp, int64_t pp, int64_t cp = 1);
  static Result<Mesh> FromConfig(const ParallelConfig& parallel);
  // FromConfig, and the launched world must be exactly dp x tp x pp ranks;
  // the error says how to launch or what to change.
  static Result<Mesh> ForWorld(const ParallelConfig& parallel, int64_t world_size);

  int64_t dp_size() const { return dp_; }
  int64_t tp_size() const { return tp_; }
  int64_t pp_size() const { return pp_; }
  int64_t cp_size() const { return cp_; }
  int64_t axis_size(MeshAxis axis) const;
  int64_t world_size() const { return dp_ * cp_ * tp_ * pp_; }

  // Ranks must lie in [0, world_size), coordinates within the sizes.
  MeshCoord Coord(int64_t rank) const;
  int64_t RankOf(const MeshCoord& coord) const;

  // The rank's position along `axis`: its rank inside its group on that axis.
  int64_t AxisIndex(MeshAxis axis, int64_t rank) const;
  // Groups along `axis` are numbered 0..NumGroups(axis)-1; two ranks share a
  // group iff they agree on the two other coordinates. Used as the colour
  // of MPI_Comm_split (with AxisIndex as the key).
  int64_t NumGroups(MeshAxis axis) const { return world_size() / axis_size(axis); }
  int64_t GroupId(MeshAxis axis, int64_t rank) const;
  // The world ranks of `rank`'s group along `axis`, element i being the
  // member whose AxisIndex is i.
  std::vector<int64_t> GroupMembers(MeshAxis axis, int64_t rank) const;
  // All groups along `axis`, indexed by GroupId: a partition of the world.
  std::vector<std::vector<int64_t>> AllGroups(MeshAxis axis) const;

  // The gradient group: the dp x cp ranks with the rank's tp and pp index
  // (the DP group itself at cp = 1). Its members are ordered dp-major:
  // GradGroupIndex = dp_index * cp + cp_index.
  int64_t GradGroupSize() const { return dp_ * cp_; }
  int64_t GradGroupId(int64_t rank) const;
  int64_t GradGroupIndex(int64_t rank) const;
  std::vector<int64_t> GradGroupMembers(int64_t rank) const;

  // "dp=2 x tp=1 x pp=1" (and " x cp=2" where cp > 1)
  std::string ToString() const;

 private:
  Mesh(int64_t dp, int64_t tp, int64_t pp, int64_t cp) : dp_(dp), tp_(tp), pp_(pp), cp_(cp) {}
  int64_t dp_, tp_, pp_, cp_;
};

}  // namespace scaletrain

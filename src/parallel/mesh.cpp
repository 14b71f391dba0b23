#include "parallel/mesh.h"

#include <cassert>
#include <limits>

namespace scaletrain {

const char* MeshAxisName(MeshAxis axis) {
  switch (axis) {
    case MeshAxis::kDp:
      return "dp";
    case MeshAxis::kTp:
      return "tp";
    case MeshAxis::kPp:
      return "pp";
  }
  return "?";
}

Result<Mesh> Mesh::Create(int64_t dp, int64_t tp, int64_t pp) {
  const int64_t sizes[] = {dp, tp, pp};
  for (MeshAxis axis : kMeshAxes) {
    const int64_t size = sizes[static_cast<int>(axis)];
    if (size < 1) {
      return InvalidArgument("parallel." + std::string(MeshAxisName(axis)) +
                             " must be at least 1, got " + std::to_string(size));
    }
  }
  // MPI ranks are ints; a product beyond that is a typo, not a cluster.
  constexpr int64_t kMaxWorld = std::numeric_limits<int>::max();
  if (dp > kMaxWorld / tp || dp * tp > kMaxWorld / pp) {
    return InvalidArgument("dp x tp x pp = " + std::to_string(dp) + " x " + std::to_string(tp) +
                           " x " + std::to_string(pp) + " exceeds the largest MPI world (" +
                           std::to_string(kMaxWorld) + " ranks)");
  }
  return Mesh(dp, tp, pp);
}

Result<Mesh> Mesh::FromConfig(const ParallelConfig& parallel) {
  return Create(parallel.dp, parallel.tp, parallel.pp);
}

Result<Mesh> Mesh::ForWorld(const ParallelConfig& parallel, int64_t world_size) {
  ST_ASSIGN_OR_RETURN(Mesh mesh, FromConfig(parallel));
  if (mesh.world_size() != world_size) {
    const std::string product = std::to_string(mesh.world_size());
    return InvalidArgument("world size " + std::to_string(world_size) +
                           " does not equal dp x tp x pp = " + std::to_string(mesh.dp_) + " x " +
                           std::to_string(mesh.tp_) + " x " + std::to_string(mesh.pp_) + " = " +
                           product + "; launch with mpirun -np " + product +
                           " or change parallel.dp/tp/pp");
  }
  return mesh;
}

int64_t Mesh::axis_size(MeshAxis axis) const {
  switch (axis) {
    case MeshAxis::kDp:
      return dp_;
    case MeshAxis::kTp:
      return tp_;
    case MeshAxis::kPp:
      return pp_;
  }
  return 0;
}

MeshCoord Mesh::Coord(int64_t rank) const {
  assert(rank >= 0 && rank < world_size());
  MeshCoord c;
  c.tp = rank % tp_;
  c.dp = (rank / tp_) % dp_;
  c.pp = rank / (tp_ * dp_);
  return c;
}

int64_t Mesh::RankOf(const MeshCoord& c) const {
  assert(c.dp >= 0 && c.dp < dp_ && c.tp >= 0 && c.tp < tp_ && c.pp >= 0 && c.pp < pp_);
  return (c.pp * dp_ + c.dp) * tp_ + c.tp;
}

int64_t Mesh::AxisIndex(MeshAxis axis, int64_t rank) const {
  const MeshCoord c = Coord(rank);
  switch (axis) {
    case MeshAxis::kDp:
      return c.dp;
    case MeshAxis::kTp:
      return c.tp;
    case MeshAxis::kPp:
      return c.pp;
  }
  return 0;
}

int64_t Mesh::GroupId(MeshAxis axis, int64_t rank) const {
  // The two coordinates a group shares, mixed in rank order (outer first).
  const MeshCoord c = Coord(rank);
  switch (axis) {
    case MeshAxis::kDp:
      return c.pp * tp_ + c.tp;
    case MeshAxis::kTp:
      return c.pp * dp_ + c.dp;
    case MeshAxis::kPp:
      return c.dp * tp_ + c.tp;
  }
  return 0;
}

std::vector<int64_t> Mesh::GroupMembers(MeshAxis axis, int64_t rank) const {
  MeshCoord c = Coord(rank);
  std::vector<int64_t> members;
  members.reserve(axis_size(axis));
  for (int64_t i = 0; i < axis_size(axis); ++i) {
    switch (axis) {
      case MeshAxis::kDp:
        c.dp = i;
        break;
      case MeshAxis::kTp:
        c.tp = i;
        break;
      case MeshAxis::kPp:
        c.pp = i;
        break;
    }
    members.push_back(RankOf(c));
  }
  return members;
}

std::vector<std::vector<int64_t>> Mesh::AllGroups(MeshAxis axis) const {
  std::vector<std::vector<int64_t>> groups(NumGroups(axis));
  for (int64_t rank = 0; rank < world_size(); ++rank) {
    groups[GroupId(axis, rank)].push_back(rank);  // ascending rank = ascending axis index
  }
  return groups;
}

std::string Mesh::ToString() const {
  return "dp=" + std::to_string(dp_) + " x tp=" + std::to_string(tp_) +
         " x pp=" + std::to_string(pp_);
}

}  // namespace scaletrain

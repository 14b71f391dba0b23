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
    case MeshAxis::kCp:
      return "cp";
  }
  return "?";
}

Result<Mesh> Mesh::Create(int64_t dp, int64_t tp, int64_t pp, int64_t cp) {
  const int64_t sizes[] = {dp, tp, pp, cp};
  for (MeshAxis axis : kMeshAxes) {
    const int64_t size = sizes[static_cast<int>(axis)];
    if (size < 1) {
      return InvalidArgument("parallel." + std::string(MeshAxisName(axis)) +
                             " must be at least 1, got " + std::to_string(size));
    }
  }
  // MPI ranks are ints; a product beyond that is a typo, not a cluster.
  constexpr int64_t kMaxWorld = std::numeric_limits<int>::max();
  if (dp > kMaxWorld / tp || dp * tp > kMaxWorld / pp || dp * tp * pp > kMaxWorld / cp) {
    return InvalidArgument("dp x tp x pp x cp = " + std::to_string(dp) + " x " + std::to_string(tp) +
                           " x " + std::to_string(pp) + " x " + std::to_string(cp) +
                           " exceeds the largest MPI world (" + std::to_string(kMaxWorld) + " ranks)");
  }
  return Mesh(dp, tp, pp, cp);
}

Result<Mesh> Mesh::FromConfig(const ParallelConfig& parallel) {
  return Create(parallel.dp, parallel.tp, parallel.pp, parallel.cp);
}

Result<Mesh> Mesh::ForWorld(const ParallelConfig& parallel, int64_t world_size) {
  ST_ASSIGN_OR_RETURN(Mesh mesh, FromConfig(parallel));
  if (mesh.world_size() != world_size) {
    const std::string product = std::to_string(mesh.world_size());
    const bool cp = mesh.cp_ > 1;
    return InvalidArgument("world size " + std::to_string(world_size) + " does not equal dp x tp x pp" +
                           (cp ? " x cp" : "") + " = " + std::to_string(mesh.dp_) + " x " +
                           std::to_string(mesh.tp_) + " x " + std::to_string(mesh.pp_) +
                           (cp ? " x " + std::to_string(mesh.cp_) : "") + " = " + product +
                           "; launch with mpirun -np " + product + " or change parallel.dp/tp/pp" +
                           (cp ? "/cp" : ""));
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
    case MeshAxis::kCp:
      return cp_;
  }
  return 0;
}

MeshCoord Mesh::Coord(int64_t rank) const {
  assert(rank >= 0 && rank < world_size());
  MeshCoord c;
  c.tp = rank % tp_;
  c.cp = (rank / tp_) % cp_;
  c.dp = (rank / (tp_ * cp_)) % dp_;
  c.pp = rank / (tp_ * cp_ * dp_);
  return c;
}

int64_t Mesh::RankOf(const MeshCoord& c) const {
  assert(c.dp >= 0 && c.dp < dp_ && c.tp >= 0 && c.tp < tp_ && c.pp >= 0 && c.pp < pp_ &&
         c.cp >= 0 && c.cp < cp_);
  return ((c.pp * dp_ + c.dp) * cp_ + c.cp) * tp_ + c.tp;
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
    case MeshAxis::kCp:
      return c.cp;
  }
  return 0;
}

int64_t Mesh::GroupId(MeshAxis axis, int64_t rank) const {
  // The two coordinates a group shares, mixed in rank order (outer first).
  const MeshCoord c = Coord(rank);
  // kDp groups also differ by cp index (the gradient group, GradGroupId,
  // joins them: pp * tp + tp).
  switch (axis) {
    case MeshAxis::kDp:
      return (c.pp * tp_ + c.tp) * cp_ + c.cp;
    case MeshAxis::kTp:
      return (c.pp * dp_ + c.dp) * cp_ + c.cp;
    case MeshAxis::kPp:
      return (c.dp * cp_ + c.cp) * tp_ + c.tp;
    case MeshAxis::kCp:
      return (c.pp * dp_ + c.dp) * tp_ + c.tp;
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
      case MeshAxis::kCp:
        c.cp = i;
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

int64_t Mesh::GradGroupId(int64_t rank) const {
  const MeshCoord c = Coord(rank);
  return c.pp * tp_ + c.tp;
}

int64_t Mesh::GradGroupIndex(int64_t rank) const {
  const MeshCoord c = Coord(rank);
  return c.dp * cp_ + c.cp;
}

std::vector<int64_t> Mesh::GradGroupMembers(int64_t rank) const {
  MeshCoord c = Coord(rank);
  std::vector<int64_t> members;
  for (c.dp = 0; c.dp < dp_; ++c.dp) {
    for (c.cp = 0; c.cp < cp_; ++c.cp) members.push_back(RankOf(c));
  }
  return members;
}

std::string Mesh::ToString() const {
  return "dp=" + std::to_string(dp_) + " x tp=" + std::to_string(tp_) +
         " x pp=" + std::to_string(pp_) + (cp_ > 1 ? " x cp=" + std::to_string(cp_) : "");
}

}  // namespace scaletrain

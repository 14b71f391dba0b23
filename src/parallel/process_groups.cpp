#include "parallel/process_groups.h"

namespace scaletrain {

Communicator& ProcessGroups::group(MeshAxis axis) {
  switch (axis) {
    case MeshAxis::kDp:
      return *dp;
    case MeshAxis::kTp:
      return *tp;
    case MeshAxis::kPp:
      return *pp;
  }
  return *world;
}

void ProcessGroups::SetStep(int64_t step) {
  for (Communicator* c : {world.get(), dp.get(), tp.get(), pp.get()}) {
    if (c != nullptr) c->set_step(step);
  }
}

void ProcessGroups::SetTimeout(double timeout_s) {
  for (Communicator* c : {world.get(), dp.get(), tp.get(), pp.get()}) {
    if (c != nullptr) c->set_timeout_s(timeout_s);
  }
}

Result<std::unique_ptr<ProcessGroups>> CreateCommunicators(const ParallelConfig& parallel,
                                                           const std::string& backend,
                                                           double timeout_s) {
  ST_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> world, CreateWorldCommunicator(backend));
  world->set_timeout_s(timeout_s);
  ST_ASSIGN_OR_RETURN(Mesh mesh, Mesh::ForWorld(parallel, world->size()));

  auto groups = std::make_unique<ProcessGroups>(mesh);
  groups->rank = world->rank();
  groups->coord = mesh.Coord(groups->rank);
  // Split in one fixed order on every rank: splits are collective.
  for (MeshAxis axis : kMeshAxes) {
    const int color = static_cast<int>(mesh.GroupId(axis, groups->rank));
    const int key = static_cast<int>(mesh.AxisIndex(axis, groups->rank));
    ST_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> comm,
                        world->Split(color, key, MeshAxisName(axis)));
    if (comm->size() != mesh.axis_size(axis) || comm->rank() != key) {
      return Internal(std::string("group '") + MeshAxisName(axis) + "' of rank " +
                      std::to_string(groups->rank) + " came out as rank " +
                      std::to_string(comm->rank()) + " of " + std::to_string(comm->size()) +
                      ", the mesh says " + std::to_string(key) + " of " +
                      std::to_string(mesh.axis_size(axis)));
    }
    switch (axis) {
      case MeshAxis::kDp:
        groups->dp = std::move(comm);
        break;
      case MeshAxis::kTp:
        groups->tp = std::move(comm);
        break;
      case MeshAxis::kPp:
        groups->pp = std::move(comm);
        break;
    }
  }
  groups->world = std::move(world);
  return groups;
}

}  // namespace scaletrain

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
    case MeshAxis::kCp:
      return *cp;
  }
  return *world;
}

std::vector<int64_t> ProcessGroups::Members(MeshAxis axis) const {
  return axis == MeshAxis::kDp ? mesh.GradGroupMembers(rank) : mesh.GroupMembers(axis, rank);
}

void ProcessGroups::SetStep(int64_t step) {
  for (Communicator* c : {world.get(), dp.get(), tp.get(), pp.get(), cp.get(), dp_host.get(), dp_cross.get()}) {
    if (c != nullptr) c->set_step(step);
  }
}

void ProcessGroups::SetPeerHosts(const std::vector<std::string>& hosts) {
  const std::string& self = hosts.at(static_cast<size_t>(rank));
  auto peers_of = [&](const std::vector<int64_t>& members) {
    GroupPeers peers;
    for (int64_t r : members)
      if (r != rank) peers.emplace_back(r, hosts.at(static_cast<size_t>(r)));
    return peers;
  };
  std::vector<int64_t> everyone(hosts.size());
  for (size_t r = 0; r < hosts.size(); ++r) everyone[r] = static_cast<int64_t>(r);
  world->SetPeers(peers_of(everyone), self);
  for (MeshAxis axis : kMeshAxes) group(axis).SetPeers(peers_of(Members(axis)), self);
}

void ProcessGroups::ClearStats() {
  for (Communicator* c : {world.get(), dp.get(), tp.get(), pp.get(), cp.get(), dp_host.get(), dp_cross.get()}) {
    if (c != nullptr) (void)c->TakeStats();
  }
}

void ProcessGroups::SetTimeout(double timeout_s) {
  for (Communicator* c : {world.get(), dp.get(), tp.get(), pp.get(), cp.get(), dp_host.get(), dp_cross.get()}) {
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
    const bool grad = axis == MeshAxis::kDp;  // the dp x cp gradient group
    const int64_t r = groups->rank;
    const int color = static_cast<int>(grad ? mesh.GradGroupId(r) : mesh.GroupId(axis, r));
    const int key = static_cast<int>(grad ? mesh.GradGroupIndex(r) : mesh.AxisIndex(axis, r));
    const int64_t size = grad ? mesh.GradGroupSize() : mesh.axis_size(axis);
    ST_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> comm,
                        world->Split(color, key, MeshAxisName(axis)));
    if (comm->size() != size || comm->rank() != key) {
      return Internal(std::string("group '") + MeshAxisName(axis) + "' of rank " +
                      std::to_string(groups->rank) + " came out as rank " +
                      std::to_string(comm->rank()) + " of " + std::to_string(comm->size()) +
                      ", the mesh says " + std::to_string(key) + " of " + std::to_string(size));
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
      case MeshAxis::kCp:
        groups->cp = std::move(comm);
        break;
    }
  }
  groups->world = std::move(world);
  return groups;
}

Status CreateHierarchicalDpGroups(ProcessGroups& groups, const std::string& mode, int64_t zero) {
  Communicator& dp = *groups.dp;
  if (mode == "flat" || dp.size() == 1) return Status::Ok();
  ST_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> host, dp.SplitByHost("dp_host"));
  // The same verdict on every member: the fewest and most DP ranks per host.
  int64_t range[2] = {-host->size(), host->size()};
  ST_RETURN_IF_ERROR(dp.Allreduce(range, 2, ReduceOp::kMax));
  const int64_t fewest = -range[0], most = range[1];
  std::string why;
  if (zero > 0) why = "it reduces ZeRO-0's all-reduce (parallel.zero = " + std::to_string(zero) + ")";
  if (why.empty() && most == dp.size()) why = "the DP group's " + std::to_string(dp.size()) + " ranks are on one host";
  if (why.empty() && fewest < 2) why = "a host holds only one of the DP group's ranks";
  if (why.empty() && fewest != most) {
    why = "the hosts hold different numbers of the DP group's ranks (" + std::to_string(fewest) + " to " +
          std::to_string(most) + ")";
  }
  if (!why.empty()) {
    if (mode == "hierarchical") {
      return FailedPrecondition("parallel.dp_reduce = \"hierarchical\" cannot apply: " + why +
                                "; use \"auto\" or \"flat\"");
    }
    return Status::Ok();
  }
  ST_ASSIGN_OR_RETURN(groups.dp_cross, dp.Split(host->rank(), dp.rank(), "dp_cross"));
  groups.dp_host = std::move(host);
  return Status::Ok();
}

}  // namespace scaletrain

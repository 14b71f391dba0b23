// The communicators one rank needs for a dp x tp x pp layout: the world and
// its DP, TP and PP groups, split from the world along the mesh (parallel/
// mesh.h), so that a group's rank is the rank's index on that mesh axis.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "comm/communicator.h"
#include "core/config.h"
#include "core/status.h"
#include "parallel/mesh.h"

namespace scaletrain {

struct ProcessGroups {
  explicit ProcessGroups(Mesh m) : mesh(std::move(m)) {}

  Mesh mesh;
  int64_t rank = 0;  // in the world
  MeshCoord coord;
  std::unique_ptr<Communicator> world;
  // The gradient group: the DP group, or with context parallelism the
  // dp x cp ranks holding this rank's model shard (Mesh::GradGroup*), its
  // rank dp_index * cp + cp_index. Gradients are reduced, ZeRO shards and
  // losses are averaged over it.
  std::unique_ptr<Communicator> dp;
  std::unique_ptr<Communicator> tp;
  std::unique_ptr<Communicator> pp;
  std::unique_ptr<Communicator> cp;  // the ring of a sequence's cp ranks
  // The hierarchical DP reduction's groups (CreateHierarchicalDpGroups): the
  // DP group's members on this host, and those at the same position on every
  // host. Null where the reduction is flat.
  std::unique_ptr<Communicator> dp_host, dp_cross;

  Communicator& group(MeshAxis axis);
  // The world ranks of this rank's group on `axis` (kDp: the gradient group).
  std::vector<int64_t> Members(MeshAxis axis) const;
  // On every group: the step watchdog errors name, and the watchdog limit.
  void SetStep(int64_t step);
  void SetTimeout(double timeout_s);
  // Forgets every group's counts so far (CommStats): a step counts from here.
  void ClearStats();
  // Tells the world and the DP, TP and PP groups their members' hosts
  // (`hosts` by world rank), for the watchdog's message (Communicator::SetPeers).
  void SetPeerHosts(const std::vector<std::string>& hosts);
};

// Creates the world communicator of `backend` ("self" or "mpi"), checks that
// its size is dp x tp x pp x cp (the error says how to launch), and splits it into
// this rank's groups. Collective over the world: every rank calls it. Splits
// run under the watchdog limit `timeout_s`, which the groups then keep.
Result<std::unique_ptr<ProcessGroups>> CreateCommunicators(
    const ParallelConfig& parallel, const std::string& backend,
    double timeout_s = Communicator::kDefaultTimeoutS);

// parallel.dp_reduce: makes dp_host and dp_cross when the reduction is
// hierarchical ("hierarchical", or "auto" where it applies: ZeRO-0, and the
// DP group spread over several hosts with the same number, at least 2, on
// each). "hierarchical" where it cannot apply is an error saying why.
// Collective over the DP group.
Status CreateHierarchicalDpGroups(ProcessGroups& groups, const std::string& mode, int64_t zero);

}  // namespace scaletrain

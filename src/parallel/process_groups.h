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
  std::unique_ptr<Communicator> dp;
  std::unique_ptr<Communicator> tp;
  std::unique_ptr<Communicator> pp;

  Communicator& group(MeshAxis axis);
  // On every group: the step watchdog errors name, and the watchdog limit.
  void SetStep(int64_t step);
  void SetTimeout(double timeout_s);
};

// Creates the world communicator of `backend` ("self" or "mpi"), checks that
// its size is dp x tp x pp (the error says how to launch), and splits it into
// this rank's groups. Collective over the world: every rank calls it. Splits
// run under the watchdog limit `timeout_s`, which the groups then keep.
Result<std::unique_ptr<ProcessGroups>> CreateCommunicators(
    const ParallelConfig& parallel, const std::string& backend,
    double timeout_s = Communicator::kDefaultTimeoutS);

}  // namespace scaletrain

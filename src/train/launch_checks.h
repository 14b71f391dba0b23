// Start-up checks of a multi-rank launch: that every rank runs the same
// build and config, and where the ranks are (their hosts).
#pragma once

#include <string>
#include <vector>

#include "comm/communicator.h"
#include "core/config.h"
#include "core/status.h"
#include "parallel/mesh.h"

namespace scaletrain {

// Every rank must run the same build (core/version.h) with the same config:
// ranks that disagree would fail later in obscure ways, or train something
// else than asked. Collective over `world`; every rank reaches the same
// verdict, naming the first rank (and its host) that differs from rank 0 and
// how. Fills `hosts` with every rank's host name, by world rank.
Status CheckRanksAgree(Communicator& world, const RunConfig& cfg, std::vector<std::string>* hosts);

// Tensor parallelism moves activations every layer: across hosts it is slow.
// Prints a warning (call on one rank) when a TP group of `mesh` spans hosts.
void WarnIfTensorParallelSpansHosts(const Mesh& mesh, const std::vector<std::string>& hosts);

}  // namespace scaletrain

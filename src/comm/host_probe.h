// Whether a peer's host still answers on the network, for the watchdog's
// message: a collective that stops may be a rank that died or hangs (its
// host answers) or a host whose link is down (it does not). The probe is a
// TCP connection attempt to the discard port (9): a host whose network
// stack is reachable answers at once, with a refusal or an accept; one cut
// off answers nothing.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace scaletrain {

enum class HostReach { kAnswers, kNoAnswer, kUnknownName };
HostReach ProbeHost(const std::string& host, double timeout_s);

// A group's other members: (world rank, host), for the watchdog.
using GroupPeers = std::vector<std::pair<int64_t, std::string>>;

// "; host st-h1 (rank 1) does not answer on the network: its link is down
// or it is gone" where some peers' hosts do not answer within `timeout_s`
// (each host probed once, the caller's own host `self_host` not at all);
// "; the hosts of ranks 1, 2 answer on the network: a rank died or hangs"
// otherwise; empty without peers.
std::string PeerReachReport(const GroupPeers& peers, const std::string& self_host, double timeout_s);

}  // namespace scaletrain

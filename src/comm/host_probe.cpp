#include "comm/host_probe.h"

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <map>

namespace scaletrain {

namespace {

// One connection attempt to `addr`: answered (connected or refused), or not
// within the time (or unreachable).
HostReach ProbeAddress(const addrinfo& addr, double timeout_s) {
  const int fd = ::socket(addr.ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return HostReach::kNoAnswer;
  HostReach reach = HostReach::kNoAnswer;
  if (::connect(fd, addr.ai_addr, addr.ai_addrlen) == 0) {
    reach = HostReach::kAnswers;
  } else if (errno == ECONNREFUSED) {
    reach = HostReach::kAnswers;
  } else if (errno == EINPROGRESS) {
    pollfd p{fd, POLLOUT, 0};
    if (::poll(&p, 1, static_cast<int>(timeout_s * 1000)) == 1) {
      int err = 0;
      socklen_t len = sizeof err;
      ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
      if (err == 0 || err == ECONNREFUSED) reach = HostReach::kAnswers;
    }
  }
  ::close(fd);
  return reach;
}

std::string RankList(const std::vector<int64_t>& ranks) {
  std::string s;
  for (size_t i = 0; i < ranks.size(); ++i) s += (i > 0 ? ", " : "") + std::to_string(ranks[i]);
  return s;
}

}  // namespace

HostReach ProbeHost(const std::string& host, double timeout_s) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (::getaddrinfo(host.c_str(), "9", &hints, &found) != 0 || found == nullptr) return HostReach::kUnknownName;
  const HostReach reach = ProbeAddress(*found, timeout_s);
  ::freeaddrinfo(found);
  return reach;
}

std::string PeerReachReport(const GroupPeers& peers, const std::string& self_host, double timeout_s) {
  std::map<std::string, std::vector<int64_t>> by_host;
  for (const auto& [rank, host] : peers)
    if (host != self_host) by_host[host].push_back(rank);
  if (by_host.empty()) return "";
  std::string silent, answering_ranks;
  for (const auto& [host, ranks] : by_host) {
    if (ProbeHost(host, timeout_s) == HostReach::kNoAnswer) {
      silent += (silent.empty() ? "" : ", ") + std::string("host ") + host + " (rank" +
                (ranks.size() > 1 ? "s " : " ") + RankList(ranks) + ")";
    } else {
      answering_ranks += (answering_ranks.empty() ? "" : ", ") + RankList(ranks);
    }
  }
  if (!silent.empty()) {
    return "; " + silent + " does not answer on the network: its link is down or it is gone";
  }
  return "; the hosts of ranks " + answering_ranks + " answer on the network: a rank died or hangs";
}

}  // namespace scaletrain

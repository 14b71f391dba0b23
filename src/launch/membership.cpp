#include "launch/membership.h"

#include <chrono>
#include <cstdio>

namespace scaletrain {
namespace {

std::string HostsPrefix(const std::string& job) { return "/scaletrain/" + job + "/hosts/"; }

}  // namespace

Result<std::unique_ptr<EtcdMembership>> EtcdMembership::Join(EtcdClient client, const std::string& job,
                                                             const std::string& self, int64_t ttl_s) {
  std::unique_ptr<EtcdMembership> m(new EtcdMembership(std::move(client), job, self, ttl_s));
  ST_RETURN_IF_ERROR(m->Register());
  m->renewer_ = std::thread([p = m.get()] { p->RenewLoop(); });
  return m;
}

EtcdMembership::~EtcdMembership() {
  stop_ = true;
  if (renewer_.joinable()) renewer_.join();
}

Status EtcdMembership::Register() {
  auto lease = client_.GrantLease(ttl_s_);
  if (!lease.ok()) return lease.status();
  ST_RETURN_IF_ERROR(client_.Put(HostsPrefix(job_) + self_, "alive", *lease));
  lease_ = *lease;
  return Status::Ok();
}

// Renews every ttl/3 s. When the lease had expired (this host was cut off
// longer than ttl), the keys under it are gone: register again, so the host
// is taken back at the next restart; leadership is not reclaimed (another
// launcher may hold it by now).
// A leader that could not renew for a whole ttl must assume its lease (and
// with it the lead) is gone, even before etcd can tell it so.
void EtcdMembership::RenewLoop() {
  const auto period = std::chrono::milliseconds(ttl_s_ * 1000 / 3);
  auto next = std::chrono::steady_clock::now() + period;
  auto renewed = std::chrono::steady_clock::now();
  while (!stop_) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    const auto now = std::chrono::steady_clock::now();
    if (now - renewed > std::chrono::seconds(ttl_s_) && leading_.exchange(false)) {
      std::fprintf(stderr, "launch: %s could not renew its etcd lease for %lld s; it no longer leads\n",
                   self_.c_str(), static_cast<long long>(ttl_s_));
    }
    if (now < next) continue;
    next = now + period;
    auto left = client_.KeepAlive(lease_);
    if (!left.ok()) continue;  // unreachable: try again next period
    if (*left > 0 || Register().ok()) renewed = std::chrono::steady_clock::now();
  }
}

Result<std::set<std::string>> EtcdMembership::LiveHosts() {
  auto kvs = client_.GetPrefix(HostsPrefix(job_));
  if (!kvs.ok()) return kvs.status();
  std::set<std::string> hosts;
  for (const auto& [key, value] : *kvs) hosts.insert(key.substr(HostsPrefix(job_).size()));
  return hosts;
}

Result<bool> EtcdMembership::TryLead() {
  if (leading_) return true;
  auto won = client_.PutIfAbsent("/scaletrain/" + job_ + "/leader", self_, lease_);
  if (!won.ok()) return won.status();
  leading_ = *won;
  return *won;
}

Status EtcdMembership::PublishExit(int code) {
  return client_.Put("/scaletrain/" + job_ + "/exit", std::to_string(code));
}

Result<std::optional<int>> EtcdMembership::PublishedExit() {
  auto v = client_.Get("/scaletrain/" + job_ + "/exit");
  if (!v.ok()) return v.status();
  if (!v->has_value()) return std::optional<int>();
  return std::optional<int>(std::atoi((*v)->c_str()));
}

Result<bool> EtcdMembership::MarkStarted() {
  auto first = client_.PutIfAbsent("/scaletrain/" + job_ + "/started", self_, 0);
  if (!first.ok()) return first.status();
  return !*first;
}

}  // namespace scaletrain

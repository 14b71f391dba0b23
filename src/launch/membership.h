// Which hosts are alive, and which launcher leads: the elastic launcher asks
// this, never a home-made protocol. Two kinds:
//  - StaticMembership: every host of the hostfile, one launcher (no etcd):
//    restarts after a rank's failure on the same hosts.
//  - EtcdMembership: one launcher per host, each keeping a key
//    JOB/hosts/HOST alive under a lease of ttl seconds (a thread renews it
//    every ttl/3). A host that stops answering loses its key when the lease
//    expires; a host that comes back puts it again. The leader is whoever
//    created JOB/leader (a transaction: create only if absent) under its
//    lease; it runs the job, and when it goes another launcher takes over.
#pragma once

#include <atomic>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>

#include "core/status.h"
#include "launch/etcd_client.h"

namespace scaletrain {

class Membership {
 public:
  virtual ~Membership() = default;
  virtual Result<std::set<std::string>> LiveHosts() = 0;
  // Seconds from a host's loss until LiveHosts no longer lists it.
  virtual double SettleSeconds() const = 0;
  // True once this launcher leads (it then runs the job).
  virtual Result<bool> TryLead() = 0;
  // Gives the lead up (cut off from the others); TryLead may win it again.
  virtual void StepDown() {}
  // False once this launcher may have lost the lead (its lease not renewed
  // for a ttl): its job must end, another launcher restarts it.
  virtual bool Leads() const { return true; }
  // The job's end (its exit code), for the launchers that do not lead.
  virtual Status PublishExit(int code) = 0;
  virtual Result<std::optional<int>> PublishedExit() = 0;
  // Marks a job start; true when an earlier leader had already started it.
  virtual Result<bool> MarkStarted() = 0;
};

class StaticMembership : public Membership {
 public:
  explicit StaticMembership(std::set<std::string> hosts) : hosts_(std::move(hosts)) {}
  Result<std::set<std::string>> LiveHosts() override { return hosts_; }
  double SettleSeconds() const override { return 0; }
  Result<bool> TryLead() override { return true; }
  Status PublishExit(int) override { return Status::Ok(); }
  Result<std::optional<int>> PublishedExit() override { return std::optional<int>(); }
  Result<bool> MarkStarted() override { return false; }

 private:
  std::set<std::string> hosts_;
};

class EtcdMembership : public Membership {
 public:
  // Registers `self` under job `job` and starts renewing its lease.
  static Result<std::unique_ptr<EtcdMembership>> Join(EtcdClient client, const std::string& job,
                                                      const std::string& self, int64_t ttl_s);
  ~EtcdMembership() override;

  Result<std::set<std::string>> LiveHosts() override;
  double SettleSeconds() const override { return static_cast<double>(ttl_s_) + 1.0; }
  Result<bool> TryLead() override;
  void StepDown() override { leading_ = false; }
  bool Leads() const override { return leading_; }
  Status PublishExit(int code) override;
  Result<std::optional<int>> PublishedExit() override;
  Result<bool> MarkStarted() override;

 private:
  EtcdMembership(EtcdClient client, std::string job, std::string self, int64_t ttl_s)
      : client_(std::move(client)), job_(std::move(job)), self_(std::move(self)), ttl_s_(ttl_s) {}
  Status Register();  // a fresh lease with this host's key (and the leader key, if held)
  void RenewLoop();

  EtcdClient client_;
  std::string job_, self_;
  int64_t ttl_s_;
  std::atomic<int64_t> lease_{0};
  std::atomic<bool> leading_{false};
  std::atomic<bool> stop_{false};
  std::thread renewer_;
};

}  // namespace scaletrain

// `scaletrain launch`: the elastic launcher (launch/elastic.h) over mpirun.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>

#include "cli/commands.h"
#include "core/strings.h"
#include "launch/elastic.h"
#include "launch/etcd_client.h"
#include "launch/membership.h"

namespace scaletrain::cli {
namespace {

struct LaunchArgs {
  std::string hostfile, etcd, job, host, mpirun = "mpirun", mpirun_args_file;
  int min_hosts = 1, max_restarts = 3;
  int64_t ttl_s = 5;
  double wait_hosts_s = 30, takeover_wait_s = 20;
  std::vector<std::string> command;
};

// One mpirun option per line (scripts/cluster.sh writes DIR/mpirun.args so).
Result<std::vector<std::string>> ReadArgsFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return NotFound("cannot read --mpirun-args-file " + path);
  std::vector<std::string> args;
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) args.push_back(line);
  }
  return args;
}

Result<LaunchOptions> BuildOptions(const LaunchArgs& a) {
  LaunchOptions o;
  if (a.command.empty() || a.command[0] != "train") {
    return InvalidArgument("launch runs `train`: put it after --, e.g. scaletrain launch --hostfile H -- train "
                           "--config C --run-dir DIR");
  }
  o.train_args.assign(a.command.begin() + 1, a.command.end());
  auto hosts = LoadHostfile(a.hostfile);
  if (!hosts.ok()) return hosts.status();
  o.hosts = std::move(hosts).value();
  if (a.min_hosts < 1 || a.min_hosts > static_cast<int>(o.hosts.size())) {
    return InvalidArgument(Fmt("--min-hosts %d: the hostfile has %zu host(s); give 1..%zu", a.min_hosts,
                               o.hosts.size(), o.hosts.size()));
  }
  if (a.max_restarts < 0) return InvalidArgument("--max-restarts must be 0 or more");
  if (a.ttl_s < 2) return InvalidArgument("--ttl must be at least 2 seconds (the lease is renewed every ttl/3)");
  o.min_hosts = a.min_hosts;
  o.max_restarts = a.max_restarts;
  o.wait_hosts_s = a.etcd.empty() ? 0 : a.wait_hosts_s;
  o.takeover_wait_s = a.takeover_wait_s;
  o.mpirun = a.mpirun;
  if (!a.mpirun_args_file.empty()) {
    auto extra = ReadArgsFile(a.mpirun_args_file);
    if (!extra.ok()) return extra.status();
    o.mpirun_args = std::move(extra).value();
  }
  o.binary = std::filesystem::read_symlink("/proc/self/exe").string();
  auto train = ReadTrainArgs(o.train_args);
  if (!train.ok()) return train.status();
  return o;
}

Result<std::unique_ptr<Membership>> BuildMembership(const LaunchArgs& a, const LaunchOptions& o) {
  std::set<std::string> names;
  for (const HostSlots& h : o.hosts) names.insert(h.name);
  if (a.etcd.empty()) return std::unique_ptr<Membership>(new StaticMembership(names));
  std::string self = a.host;
  if (self.empty()) {
    char buf[256] = {};
    gethostname(buf, sizeof buf - 1);
    self = buf;
  }
  if (names.count(self) == 0) {
    return InvalidArgument("this host, '" + self + "', is not in the hostfile " + a.hostfile +
                           " (pass --host NAME as the hostfile names it)");
  }
  auto client = EtcdClient::Connect(a.etcd);
  if (!client.ok()) return client.status();
  std::string job = a.job;
  if (job.empty()) job = std::filesystem::path(ReadTrainArgs(o.train_args)->run_dir).filename().string();
  auto m = EtcdMembership::Join(std::move(client).value(), job, self, a.ttl_s);
  if (!m.ok()) return m.status();
  return std::unique_ptr<Membership>(std::move(m).value());
}

}  // namespace

void RegisterLaunchCommand(CLI::App& app, int* exit_code) {
  auto* cmd = app.add_subcommand(
      "launch", "run `train` over a set of hosts and restart it on the survivors when a host fails");
  auto a = std::make_shared<LaunchArgs>();
  cmd->add_option("--hostfile", a->hostfile, "the hosts: NAME slots=K per line (mpirun's format)")->required();
  cmd->add_option("--etcd", a->etcd,
                  "etcd endpoint (http://HOST:PORT) for membership and the leader: run one launcher per "
                  "host; without it one launcher restarts on every hostfile host");
  cmd->add_option("--job", a->job, "the job's name in etcd (default: the run directory's name)");
  cmd->add_option("--host", a->host, "this launcher's host as the hostfile names it (default: hostname)");
  cmd->add_option("--min-hosts", a->min_hosts, "fewest hosts to run on (default 1)");
  cmd->add_option("--max-restarts", a->max_restarts, "restarts after failures before giving up (default 3)");
  cmd->add_option("--ttl", a->ttl_s, "seconds a silent host keeps its membership (default 5)");
  cmd->add_option("--wait-hosts", a->wait_hosts_s, "at the first start, seconds to wait for every host (30)");
  cmd->add_option("--takeover-wait", a->takeover_wait_s,
                  "a new leader's wait for the old job's ranks to end, seconds (20)");
  cmd->add_option("--mpirun", a->mpirun, "the mpirun to run (default: mpirun on PATH)");
  cmd->add_option("--mpirun-args-file", a->mpirun_args_file,
                  "mpirun options, one per line (e.g. the emulated cluster's DIR/mpirun.args)");
  cmd->add_option("command", a->command, "-- train --config C --run-dir DIR [--set k=v ...]");
  cmd->callback([a, exit_code] {
    auto options = BuildOptions(*a);
    if (!options.ok()) {
      std::fprintf(stderr, "error: %s\n", options.status().message().c_str());
      *exit_code = 2;
      return;
    }
    auto membership = BuildMembership(*a, *options);
    if (!membership.ok()) {
      std::fprintf(stderr, "error: %s\n", membership.status().message().c_str());
      *exit_code = 2;
      return;
    }
    InstallLaunchSignals();
    *exit_code = RunLaunch(*options, **membership);
  });
}

}  // namespace scaletrain::cli

#include "launch/elastic.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include "core/config.h"
#include "core/jsonl.h"
#include "core/strings.h"

namespace scaletrain {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

std::atomic<int> g_stop_signal{0};

void OnStopSignal(int sig) { g_stop_signal = sig; }

// Sleeps up to `seconds`, returning early (false) when a stop signal came.
bool SleepUnlessStopped(double seconds) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < end) {
    if (g_stop_signal != 0) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return true;
}

// The value of a flag given as "--name value" or "--name=value" at args[i].
bool FlagValue(const std::vector<std::string>& args, size_t& i, const std::string& name, std::string* value) {
  if (args[i] == name && i + 1 < args.size()) {
    *value = args[++i];
    return true;
  }
  if (args[i].rfind(name + "=", 0) == 0) {
    *value = args[i].substr(name.size() + 1);
    return true;
  }
  return false;
}

// RUN_DIR/events.jsonl, one record per start, failure and end, each also a
// line on stderr for the person watching.
class EventLog {
 public:
  explicit EventLog(std::string run_dir) : path_(std::move(run_dir) + "/events.jsonl") {}
  void Record(json event, const std::string& line) {
    const auto now = std::chrono::system_clock::now();
    const double t_s = std::chrono::duration<double>(now.time_since_epoch()).count();
    const std::time_t secs = std::chrono::system_clock::to_time_t(now);
    char stamp[32];
    std::strftime(stamp, sizeof stamp, "%FT%TZ", std::gmtime(&secs));
    event["time"] = stamp;
    event["t_s"] = t_s;
    std::error_code ec;
    fs::create_directories(fs::path(path_).parent_path(), ec);
    std::ofstream out(path_, std::ios::app);
    out << event.dump() << "\n";
    std::fprintf(stderr, "%s launch: %s\n", stamp, line.c_str());
    std::fflush(stderr);
  }

 private:
  std::string path_;
};

int64_t LastMetricsStep(const std::string& run_dir) {
  int64_t last = -1;
  ForEachStepRecord(run_dir + "/metrics.jsonl",
                    [&](const std::string&, const json& r) { last = std::max(last, r["step"].get<int64_t>()); });
  return last;
}

// The newest checkpoint's step by its directory name (step_00000050); -1: none.
int64_t NewestCheckpointStep(const std::string& run_dir) {
  int64_t newest = -1;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(run_dir + "/checkpoints", ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("step_", 0) != 0 || name.find_first_not_of("0123456789", 5) != std::string::npos) continue;
    newest = std::max<int64_t>(newest, std::stoll(name.substr(5)));
  }
  return newest;
}

json HostNames(const std::vector<HostSlots>& hosts) {
  json names = json::array();
  for (const HostSlots& h : hosts) names.push_back(h.name);
  return names;
}

std::string Joined(const json& names) {
  std::string s;
  for (const json& n : names) s += (s.empty() ? "" : ", ") + n.get<std::string>();
  return s.empty() ? "none" : s;
}

std::vector<std::string> MpirunArgv(const LaunchOptions& o, const JobLayout& layout) {
  std::vector<std::string> argv{o.mpirun};
  argv.insert(argv.end(), o.mpirun_args.begin(), o.mpirun_args.end());
  argv.insert(argv.end(), {"-np", std::to_string(layout.world), "--host", HostListArg(layout.hosts),
                           o.binary, "train"});
  argv.insert(argv.end(), o.train_args.begin(), o.train_args.end());
  argv.insert(argv.end(), {"--set", "parallel.dp=" + std::to_string(layout.dp), "--resume", "auto"});
  return argv;
}

// RunMpirun's code when the launcher lost the lead while its job ran.
constexpr int kNoLongerLeading = -1;

// The hosts of `layout` the membership no longer lists (none when it
// cannot be asked).
json LostHosts(Membership& membership, const JobLayout& layout) {
  json lost = json::array();
  auto live = membership.LiveHosts();
  for (const HostSlots& h : layout.hosts) {
    if (live.ok() && live->count(h.name) == 0) lost.push_back(h.name);
  }
  return lost;
}

// Runs mpirun to its end and returns its exit code (128 + N when a signal
// ended it). A stop signal to the launcher reaches it as SIGUSR1, once. Every
// second the membership is asked: a host of the job that lost its lease ends
// the job at once (mpirun's process group killed), rather than when
// OpenMPI's keepalives give up on it; *lost names those hosts.
int RunMpirun(const std::vector<std::string>& argv, const JobLayout& layout, Membership& membership,
              EventLog& log, json* lost) {
  std::vector<char*> cargv;
  for (const std::string& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);
  const pid_t pid = fork();
  if (pid < 0) return 1;
  if (pid == 0) {
    // Its own process group: a Ctrl-C at the terminal reaches only the
    // launcher, which asks for a checkpoint instead of a kill. It dies with
    // the launcher.
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    execvp(cargv[0], cargv.data());
    std::fprintf(stderr, "launch: cannot run %s: %s (install openmpi-bin or pass --mpirun)\n", cargv[0],
                 std::strerror(errno));
    _exit(127);
  }
  bool forwarded = false;
  auto next_check = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  for (;;) {
    int status = 0;
    const pid_t done = waitpid(pid, &status, WNOHANG);
    if (done == pid) return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (!membership.Leads()) {
      // Cut off: another launcher restarts the job; this one's must end
      // and write nothing more to the run directory.
      kill(-pid, SIGKILL);
      waitpid(pid, &status, 0);
      return kNoLongerLeading;
    }
    if (std::chrono::steady_clock::now() >= next_check && lost->empty() && !forwarded) {
      next_check += std::chrono::seconds(1);
      *lost = LostHosts(membership, layout);
      if (!lost->empty()) {
        log.Record(json{{"event", "host_lost"}, {"hosts", *lost}},
                   "lost: " + Joined(*lost) + " (its membership lease expired); ending the job to restart");
        kill(-pid, SIGKILL);
      }
    }
    if (g_stop_signal != 0 && !forwarded) {
      forwarded = true;
      kill(pid, SIGUSR1);
      log.Record(json{{"event", "stop_requested"}, {"signal", strsignal(g_stop_signal)}},
                 Fmt("%s: asking every rank to write a checkpoint and stop", strsignal(g_stop_signal)));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

struct LastStart {
  JobLayout layout;
  int restart = 0;
};

// The newest start recorded in RUN_DIR/events.jsonl (by this launcher or one
// that led before it).
std::optional<LastStart> ReadLastStart(const std::string& run_dir) {
  std::optional<LastStart> last;
  std::ifstream in(run_dir + "/events.jsonl");
  for (std::string line; std::getline(in, line);) {
    const json j = json::parse(line, nullptr, false);
    if (!j.is_object() || j.value("event", "") != "start" || !j.contains("hosts")) continue;
    LastStart s;
    for (const json& h : j["hosts"]) s.layout.hosts.push_back(HostSlots{h.get<std::string>(), 1});
    s.restart = j.value("restart", 0);
    s.layout.dp = j.value("dp", int64_t{1});
    last = s;
  }
  return last;
}

struct Leader {
  const LaunchOptions& options;
  const TrainArgs& train;
  Membership& membership;
  EventLog log;

  int Finish(int code) {
    Status s = membership.PublishExit(code);
    if (!s.ok()) std::fprintf(stderr, "launch: warning: %s\n", s.message().c_str());
    return code;
  }

  // The first start waits (up to wait_hosts_s) for every host to join.
  void WaitForHosts() {
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(options.wait_hosts_s);
    while (std::chrono::steady_clock::now() < end && g_stop_signal == 0) {
      auto live = membership.LiveHosts();
      if (live.ok() && live->size() >= options.hosts.size()) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(250));
    }
  }

  // After a failure: who is gone, how far the run got, what a restart loses.
  // lost: the hosts already known gone (no need to wait for the leases).
  void RecordFailure(int code, const JobLayout& layout, int restart, json failed) {
    if (failed.empty()) {
      SleepUnlessStopped(membership.SettleSeconds());
      failed = LostHosts(membership, layout);
    }
    const int64_t last = LastMetricsStep(train.run_dir);
    const int64_t checkpoint = NewestCheckpointStep(train.run_dir);
    const int64_t lost = std::max<int64_t>(0, last - std::max<int64_t>(checkpoint, 0));
    log.Record(json{{"event", "failure"}, {"restart", restart}, {"exit_code", code}, {"failed_hosts", failed},
                    {"last_step", last}, {"checkpoint_step", checkpoint}, {"steps_lost", lost}},
               Fmt("the job failed (%s) after step %lld; %s; newest checkpoint step %lld: %lld step(s) to redo",
                   code < 0 ? "its leader's host lost" : Fmt("exit %d", code).c_str(), static_cast<long long>(last),
                   failed.empty() ? "every host still answers (a rank failed)"
                                  : ("lost: " + Joined(failed)).c_str(),
                   static_cast<long long>(checkpoint), static_cast<long long>(lost)));
  }

  // The lead taken from a launcher that is gone (its host lost with it):
  // wait for the old job's ranks to end, then record the failure from the
  // predecessor's last start. Returns the restart count to continue from.
  int TakeOver() {
    log.Record(json{{"event", "takeover"}}, Fmt("this launcher took the lead from one that is gone; waiting "
                                                "%.0f s for the old job's ranks to end",
                                                options.takeover_wait_s));
    SleepUnlessStopped(options.takeover_wait_s);
    std::optional<LastStart> last = ReadLastStart(train.run_dir);
    if (!last.has_value()) return 0;
    RecordFailure(-1, last->layout, last->restart + 1, LostHosts(membership, last->layout));
    return last->restart + 1;
  }

  std::optional<int> StepDown(const std::string& why) {
    std::fprintf(stderr, "launch: %s; stepping down\n", why.c_str());
    membership.StepDown();
    return std::nullopt;
  }

  // The start's record: the hosts, the dp, the checkpoint it resumes from.
  void RecordStart(int restart, const JobLayout& layout, size_t live_hosts) {
    const int64_t from = NewestCheckpointStep(train.run_dir);
    const std::string fewer =
        layout.hosts.size() < live_hosts
            ? Fmt("; %zu of %zu live hosts: the config allows no larger dp", layout.hosts.size(), live_hosts)
            : "";
    const std::string resume =
        from >= 0 ? Fmt(" from the checkpoint of step %lld", static_cast<long long>(from)) : "";
    log.Record(json{{"event", "start"}, {"restart", restart}, {"hosts", HostNames(layout.hosts)},
                    {"world", layout.world}, {"dp", layout.dp}, {"resume_step", from}},
               Fmt("%s %d rank(s) on %s (dp %lld%s)%s", restart == 0 ? "starting" : "restarting", layout.world,
                   Joined(HostNames(layout.hosts)).c_str(), static_cast<long long>(layout.dp), fewer.c_str(),
                   resume.c_str()));
  }

  // The job's exit code, or nothing when this launcher stepped down.
  std::optional<int> Run() {
    int first = 0;
    auto took_over = membership.MarkStarted();
    if (took_over.ok() && *took_over) {
      first = TakeOver();
    } else {
      WaitForHosts();
    }
    for (int restart = first;; ++restart) {
      if (g_stop_signal != 0) return Finish(128 + g_stop_signal);
      if (!membership.Leads()) return std::nullopt;  // cut off: another launcher leads now
      auto live = membership.LiveHosts();
      // Cut off from etcd: this launcher's lease is going, and another one
      // will lead; follow again.
      if (!live.ok()) return StepDown(live.status().message());
      auto layout = ChooseLayout(options.hosts, *live, options.min_hosts, train);
      if (!layout.ok() && restart == 0) {
        // Nothing ran: leave no run directory a retry would trip on.
        std::fprintf(stderr, "error: %s\n", layout.status().message().c_str());
        return Finish(2);
      }
      if (!layout.ok()) {
        log.Record(json{{"event", "gave_up"}, {"reason", layout.status().message()}},
                   "error: " + layout.status().message());
        return Finish(2);
      }
      RecordStart(restart, *layout, live->size());
      json lost = json::array();
      const int code = RunMpirun(MpirunArgv(options, *layout), *layout, membership, log, &lost);
      if (code == kNoLongerLeading) {
        return StepDown("lost the lead (no etcd lease renewal for a ttl); its job ended, another "
                        "launcher restarts it");
      }
      if (code == 0 || code == 75 || g_stop_signal != 0) {
        log.Record(json{{"event", code == 0 ? "done" : "stopped"}, {"exit_code", code}},
                   code == 0 ? "the job finished" : Fmt("the job stopped (exit %d)", code));
        return Finish(code);
      }
      RecordFailure(code, *layout, restart + 1, lost);
      if (restart + 1 > options.max_restarts) {
        log.Record(json{{"event", "gave_up"}, {"reason", "max_restarts"}},
                   Fmt("error: %d restart(s) used (--max-restarts); the job ends with exit %d", restart, code));
        return Finish(code);
      }
    }
  }
};

}  // namespace

void InstallLaunchSignals() {
  struct sigaction sa {};
  sa.sa_handler = OnStopSignal;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGTERM, SIGINT, SIGUSR1, SIGUSR2}) sigaction(sig, &sa, nullptr);
}

Result<TrainArgs> ReadTrainArgs(const std::vector<std::string>& args) {
  TrainArgs t;
  for (size_t i = 0; i < args.size(); ++i) {
    std::string value;
    if (FlagValue(args, i, "--config", &t.config)) continue;
    if (FlagValue(args, i, "--run-dir", &t.run_dir)) continue;
    if (FlagValue(args, i, "--set", &value)) {
      if (value.rfind("parallel.dp=", 0) == 0) {
        return InvalidArgument("the launcher chooses parallel.dp from the live hosts: remove --set " + value);
      }
      t.sets.push_back(value);
      continue;
    }
    if (FlagValue(args, i, "--resume", &value)) {
      return InvalidArgument("the launcher resumes from the newest intact checkpoint itself (--resume auto): "
                             "remove --resume " + value);
    }
  }
  if (t.config.empty()) return InvalidArgument("the train arguments after -- need --config FILE");
  if (t.run_dir.empty()) {
    return InvalidArgument("the train arguments after -- need --run-dir DIR (restarts resume from its "
                           "checkpoints; on several hosts it must be on storage every host sees)");
  }
  return t;
}

Result<JobLayout> ChooseLayout(const std::vector<HostSlots>& hosts, const std::set<std::string>& live,
                               int min_hosts, const TrainArgs& train) {
  auto base = LoadRunConfig(train.config, train.sets);
  if (!base.ok()) return base.status();
  const int64_t model_parallel = base->parallel.tp * base->parallel.pp;
  std::vector<HostSlots> alive;
  for (const HostSlots& h : hosts) {
    if (live.count(h.name) != 0) alive.push_back(h);
  }
  std::string why;
  for (size_t n = alive.size(); n >= static_cast<size_t>(std::max(min_hosts, 1)) && n > 0; --n) {
    JobLayout layout{std::vector<HostSlots>(alive.begin(), alive.begin() + static_cast<long>(n)), 0, 0};
    layout.world = TotalSlots(layout.hosts);
    if (layout.world % model_parallel != 0) {
      why = Fmt("%d rank(s) are not a multiple of tp x pp = %lld", layout.world,
                static_cast<long long>(model_parallel));
      continue;
    }
    layout.dp = layout.world / model_parallel;
    std::vector<std::string> sets = train.sets;
    sets.push_back("parallel.dp=" + std::to_string(layout.dp));
    auto cfg = LoadRunConfig(train.config, sets);
    if (cfg.ok()) return layout;
    why = Fmt("at dp %lld: ", static_cast<long long>(layout.dp)) + cfg.status().message();
  }
  return FailedPrecondition(Fmt("too few hosts: %zu of %zu answer, at least %d needed (--min-hosts)%s; bring "
                                "hosts back, lower --min-hosts, or change the layout",
                                alive.size(), hosts.size(), min_hosts, why.empty() ? "" : ("; " + why).c_str()));
}

int RunLaunch(const LaunchOptions& options, Membership& membership) {
  auto train = ReadTrainArgs(options.train_args);
  if (!train.ok()) {
    std::fprintf(stderr, "error: %s\n", train.status().message().c_str());
    return 2;
  }
  while (g_stop_signal == 0) {
    auto exited = membership.PublishedExit();
    if (exited.ok() && exited->has_value()) {
      std::fprintf(stderr, "launch: the job ended (exit %d); another host's launcher led it\n", **exited);
      return **exited;
    }
    auto lead = membership.TryLead();
    if (lead.ok() && *lead) {
      std::optional<int> code = Leader{options, *train, membership, EventLog(train->run_dir)}.Run();
      if (code.has_value()) return *code;
    }
    std::this_thread::sleep_for(std::chrono::seconds(1));
  }
  return 128 + g_stop_signal;
}

}  // namespace scaletrain

// The elastic launcher behind `scaletrain launch`: runs `scaletrain train`
// over the live hosts through mpirun, and when the job fails (a rank's exit,
// the watchdog, a host that stops answering) waits until the membership
// shows who is gone, chooses the largest layout the survivors allow, and
// starts again from the newest intact checkpoint (--resume auto). The global
// batch stays: a smaller data-parallel size means more micro-batches per
// rank, so the loss curve continues. A host that comes back is taken at the
// next restart. Every start, failure and restart is a line on stderr and a
// record in RUN_DIR/events.jsonl (the report shows them).
//
// Signals: SIGTERM, SIGINT, SIGUSR1 and SIGUSR2 to the launcher become
// SIGUSR1 to mpirun, which passes it to every rank: they write a checkpoint
// and exit 75, and so does the launcher (mpirun itself treats SIGTERM as
// "kill the job": no checkpoint).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "launch/hostfile.h"
#include "launch/membership.h"

namespace scaletrain {

struct LaunchOptions {
  std::vector<HostSlots> hosts;  // the hostfile, in the order hosts are filled
  int min_hosts = 1;
  int max_restarts = 3;
  double wait_hosts_s = 30;      // at the first start: how long to wait for every host to join
  double takeover_wait_s = 20;   // a new leader's wait for the old job's ranks to end
  std::string mpirun = "mpirun";
  std::vector<std::string> mpirun_args;  // before -np (e.g. a cluster's mpirun.args)
  std::string binary;                    // the scaletrain binary the ranks run
  std::vector<std::string> train_args;   // `train`'s own arguments
};

// What `train` arguments the launcher reads: the config and --set values (to
// choose a layout the config allows), the run directory (for the events, the
// metrics and the checkpoints). Errors name the flag to add or remove.
struct TrainArgs {
  std::string config, run_dir;
  std::vector<std::string> sets;
};
Result<TrainArgs> ReadTrainArgs(const std::vector<std::string>& args);

struct JobLayout {
  std::vector<HostSlots> hosts;
  int64_t dp = 1;
  int world = 0;
};
// The most hosts (from the hostfile's order, live ones only, at least
// min_hosts) whose ranks make a layout the config accepts at tp x pp fixed:
// world / (tp * pp) data-parallel ranks, the global batch divisible as the
// config requires. The error says how many are live and why none fits.
Result<JobLayout> ChooseLayout(const std::vector<HostSlots>& hosts, const std::set<std::string>& live,
                               int min_hosts, const TrainArgs& train);

// Runs the launcher to the job's end; returns the process exit code (0 done,
// 75 stopped by a signal with a checkpoint, else the job's failure).
int RunLaunch(const LaunchOptions& options, Membership& membership);

// Installs the signal handlers that turn a scheduler's stop into SIGUSR1
// for mpirun.
void InstallLaunchSignals();

}  // namespace scaletrain

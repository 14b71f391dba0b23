#include "train/stop_signals.h"

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <thread>

#include "comm/flight_recorder.h"

namespace scaletrain {

namespace {

std::atomic<int> g_signal{0};

sigset_t StopSet() {
  sigset_t set;
  sigemptyset(&set);
  for (int sig : {SIGTERM, SIGUSR1, SIGINT}) sigaddset(&set, sig);
  return set;
}

// The signals are blocked in every thread and taken here, one at a time,
// with sigwait: no handler ever interrupts the training threads. (An
// asynchronous handler did: with it, a signal arriving during a step
// corrupted the heap now and then, even with an empty handler, in code that
// uses the stack below its stack pointer.)
void WaitForSignals() {
  const sigset_t set = StopSet();
  int interrupts = 0;
  for (;;) {
    int sig = 0;
    if (sigwait(&set, &sig) != 0) continue;
    if (sig == SIGINT && ++interrupts >= 2) {
      std::fputs("interrupted twice: exiting at once, without a checkpoint\n", stderr);
      std::fflush(stderr);
      ::_exit(kExitInterrupted);
    }
    // SIGTERM is also what mpirun sends every rank when another rank ended
    // the job (a watchdog): each writes its last collectives (a thread, not
    // a handler: safe to write a file).
    if (sig == SIGTERM && FlightRecorder::Get().enabled()) {
      (void)FlightRecorder::Get().Dump("SIGTERM");
      // Ended from outside while stuck in a collective (mpirun lost a host,
      // or another rank's watchdog ended the job): say which one, since
      // this rank may not live to report it.
      const std::string stuck = FlightRecorder::Get().OldestInFlight();
      if (!stuck.empty()) {
        std::fprintf(stderr, "rank %lld: SIGTERM while waiting in %s\n",
                     static_cast<long long>(FlightRecorder::Get().world_rank()), stuck.c_str());
        std::fflush(stderr);
      }
    }
    int none = 0;
    g_signal.compare_exchange_strong(none, sig);
  }
}

}  // namespace

void StopSignals::Install() {
  static std::atomic<bool> installed{false};
  if (installed.exchange(true)) return;
  // Blocked before any other thread starts (MPI's, OpenMP's, the checkpoint
  // writer's), which inherit the mask.
  const sigset_t set = StopSet();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  std::thread(WaitForSignals).detach();
}

bool StopSignals::Requested() { return g_signal.load() != 0; }
int StopSignals::Signal() { return g_signal.load(); }
void StopSignals::Clear() { g_signal = 0; }

const char* SignalName(int sig) {
  switch (sig) {
    case SIGTERM:
      return "SIGTERM";
    case SIGUSR1:
      return "SIGUSR1";
    case SIGINT:
      return "SIGINT";
    default:
      return "a signal";
  }
}

}  // namespace scaletrain

// Preemption. SIGTERM and SIGUSR1 (what Slurm's --signal and a Kubernetes
// termination grace period send) and a first SIGINT (Ctrl-C) ask the run to
// stop: at the next step boundary every rank agrees on the step, a
// checkpoint of it is written, and the process exits with
// kExitPreempted. A second SIGINT ends the process at once
// (kExitInterrupted), without a checkpoint. A thread of their own takes the
// signals (sigwait) and only sets a flag; the trainer acts on it at a step
// boundary.
#pragma once

namespace scaletrain {

inline constexpr int kExitPreempted =
    75;  // EX_TEMPFAIL: stopped with a checkpoint; resume with --resume auto
inline constexpr int kExitInterrupted = 130;  // 128 + SIGINT: a second Ctrl-C, no checkpoint

class StopSignals {
 public:
  // Blocks the signals in this thread (and the threads it starts after) and
  // starts the thread that takes them. Once per process, before other
  // threads start.
  static void Install();
  // Whether a stop was asked for, and by which signal (0: none).
  static bool Requested();
  static int Signal();
  // Test hook: forgets a request.
  static void Clear();
};

const char* SignalName(int signal);  // "SIGTERM", ...

}  // namespace scaletrain

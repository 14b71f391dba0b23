#!/usr/bin/env python3
"""Goodput of this project's own runs under failures, against the planner's model.

A run of a small model (one process, one thread), checkpointing every K
steps, is killed at exponential times (mean --mtbf-s, fixed seed; SIGKILL, so
the job ends at once as when a node dies) and resumed with `--resume auto`
until it finishes.

The clock is the run's own CPU time (user + system, all its threads), not
the wall: on a machine shared with other work the wall-clock speed of a step
changes several-fold from minute to minute, which no model of failures is
about. Every time below, the failures' included, is CPU seconds of the run;
the model does not care which clock it is given, as long as it is one.

Each trial's time, summed over its attempts, is set against the expected
time of the planner's goodput model (src/plan/goodput.h, ExpectedRunTimes:
Daly's complete model) fed with this run's own figures, measured here in the
same session without failures:

  step s       (W(2N) - W(N)) / N, two clean runs without checkpoints
  checkpoint C (W(N, every K) - W(N)) / saves: what a save costs
  restart R    a resume from a checkpoint K steps before the end, less K steps
(each W the fastest of two runs), once before the trials and once after: a
machine whose load changes between them shows as two different predictions.

The peer is the model; the script prints the measured and predicted goodput
(useful time N s over the run's time) and their ratio. A benchmark, not a test:
docs/planner.md, "Goodput", records its results.

Usage (Linux: /proc): bench/goodput.py [--steps N] [--every K] [--mtbf-s M]
                                       [--trials T] [--seed S] [--build-dir DIR]
"""
import argparse
import math
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIG = os.path.join(ROOT, "configs", "shakespeare_char.toml")


def shape(data_dir, steps):
    """The run's --set flags: 4 layers x 128 wide, context 128, 8 sequences a step."""
    sets = ["model.n_layer=4", "model.n_head=4", "model.n_embd=128", "model.block_size=128",
            "training.global_batch_size=8", "training.micro_batch_size=4", "training.threads=1",
            "training.eval_interval=0", "training.eval_steps=1", "training.sample_tokens=0",
            f"training.steps={steps}",
            f'data.train="{data_dir}/train.bin"', f'data.val="{data_dir}/val.bin"']
    return [a for s in sets for a in ("--set", s)]


TICKS_PER_S = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid):
    """User + system CPU time of a running process, all its threads (/proc)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / TICKS_PER_S  # utime, stime


class Runner:
    def __init__(self, binary, data_dir, work):
        self.binary, self.data_dir, self.work = binary, data_dir, work

    def command(self, run_dir, steps, every, resume):
        cmd = [self.binary, "train", "--config", CONFIG, "--quiet", "--run-dir", run_dir]
        cmd += shape(self.data_dir, steps)
        cmd += ["--set", f"checkpoint.interval={every}"]
        return cmd + (["--resume", "auto"] if resume else [])

    def attempt(self, run_dir, steps, every, resume, kill_after_s=math.inf):
        """One launch, killed once it has used kill_after_s of CPU time.
        Returns (CPU seconds, finished)."""
        with open(os.path.join(self.work, "out.txt"), "ab") as out:
            p = subprocess.Popen(self.command(run_dir, steps, every, resume), stdout=out,
                                 stderr=subprocess.STDOUT)
        while True:
            pid, status, usage = os.wait4(p.pid, os.WNOHANG)
            if pid == p.pid:
                p.returncode = os.waitstatus_to_exitcode(status)
                break
            if cpu_seconds(p.pid) >= kill_after_s:
                os.kill(p.pid, signal.SIGKILL)
                os.wait4(p.pid, 0)
                p.returncode = -9
                return kill_after_s, False
            time.sleep(0.005)
        if p.returncode != 0:
            sys.exit(f"error: the run failed (exit {p.returncode}); see {self.work}/out.txt")
        return usage.ru_utime + usage.ru_stime, True

    def clean(self, steps, every, repeat=2):
        """The fastest of `repeat` runs without failures (the least disturbed
        by other work on the machine)."""
        best = math.inf
        for _ in range(repeat):
            run_dir = os.path.join(self.work, "clean")
            shutil.rmtree(run_dir, ignore_errors=True)
            best = min(best, self.attempt(run_dir, steps, every, resume=False)[0])
        return best


def measure_inputs(r, n, every):
    """Step, checkpoint stall and restart of this run, without failures."""
    w_n, w_2n = r.clean(n, 0), r.clean(2 * n, 0)
    step_s = (w_2n - w_n) / n
    w_every = r.clean(n, every)
    saves = (n - 1) // every  # the final save happens in both runs
    write_s = max(0.0, (w_every - w_n) / saves)
    w_resume = math.inf
    for _ in range(2):
        run_dir = os.path.join(r.work, "resume")
        shutil.rmtree(run_dir, ignore_errors=True)
        r.attempt(run_dir, n - every, every, resume=False)
        w_resume = min(w_resume, r.attempt(run_dir, n, every, resume=True)[0])
    restart_s = w_resume - every * step_s
    return step_s, write_s, restart_s


def trial(r, n, every, mtbf_s, rng, index):
    """One run to the end under failures: its time and interruptions."""
    run_dir = os.path.join(r.work, f"trial{index}")
    wall, failures = 0.0, 0
    while True:
        x = rng.expovariate(1.0 / mtbf_s)
        seconds, finished = r.attempt(run_dir, n, every, resume=True, kill_after_s=x)
        wall += seconds
        if finished:
            break
        failures += 1
    shutil.rmtree(run_dir, ignore_errors=True)
    return wall, failures


def expected_wall_s(useful_s, tau, c, r, m):
    """Daly's complete model, as goodput.h's ExpectedRunTimes sums it (whole segments)."""
    return m * math.exp(r / m) * math.expm1((tau + c) / m) * useful_s / tau


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--every", type=int, default=30)
    ap.add_argument("--mtbf-s", type=float, default=10.0)
    ap.add_argument("--trials", type=int, default=10)
    ap.add_argument("--seed", type=int, default=2026)
    ap.add_argument("--build-dir", default=os.path.join(ROOT, "build"))
    a = ap.parse_args()
    binary = os.path.join(a.build_dir, "scaletrain")
    data_dir = os.path.join(a.build_dir, "data", "shakespeare_char")
    if not os.path.isfile(os.path.join(data_dir, "train.bin")):
        subprocess.run([binary, "data", "prepare", "--input", os.path.join(ROOT, "data", "tinyshakespeare.txt"),
                        "--output", data_dir], check=True, stdout=subprocess.DEVNULL)
    work = tempfile.mkdtemp(prefix="goodput-")
    r = Runner(binary, data_dir, work)

    def predict(when):
        step_s, write_s, restart_s = measure_inputs(r, a.steps, a.every)
        useful_s = a.steps * step_s
        wall = expected_wall_s(useful_s, a.every * step_s, write_s, restart_s, a.mtbf_s)
        print(f"{when}: step {step_s:.4f} s, checkpoint {write_s:.3f} s a save, restart "
              f"{restart_s:.2f} s: {a.steps} steps = {useful_s:.1f} s of training; predicted "
              f"{wall:.1f} s with failures, goodput {useful_s / wall:.3f}", flush=True)
        return useful_s, wall

    before = predict("measured before the trials")
    rng = random.Random(a.seed)
    walls, fails = [], []
    for i in range(a.trials):
        w, f = trial(r, a.steps, a.every, a.mtbf_s, rng, i)
        walls.append(w)
        fails.append(f)
        print(f"  trial {i + 1}: {w:.1f} s, {f} interruptions", flush=True)
    after = predict("measured after the trials")
    useful_s, expected = (before[0] + after[0]) / 2, (before[1] + after[1]) / 2
    mean_wall = statistics.mean(walls)
    sem = statistics.stdev(walls) / math.sqrt(len(walls)) if len(walls) > 1 else 0.0
    print(f"all times are the run's CPU seconds; MTBF {a.mtbf_s} s, a checkpoint every {a.every} steps, {a.trials} trials (seed {a.seed})")
    print(f"measured:  {mean_wall:.1f} +- {sem:.1f} s (mean +- its standard error), "
          f"{statistics.mean(fails):.2f} interruptions, goodput {useful_s / mean_wall:.3f}")
    print(f"predicted: {expected:.1f} s (mean of the two), {expected / a.mtbf_s:.2f} interruptions, "
          f"goodput {useful_s / expected:.3f}")
    print(f"ratio (measured / predicted goodput): {expected / mean_wall:.3f}")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()

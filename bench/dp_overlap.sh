#!/usr/bin/env bash
# Overlap of gradient communication with backward, measured from the trace:
# a dp=2 training run (2 MPI ranks, 1 compute thread each) with --trace, on a
# model and bucket size where backward takes much longer than the all-reduces,
# then bench/trace_overlap.py: for each step's backward, the share of the
# collectives' time (union of the bucket spans, issue to finish) that falls
# inside [first backward span start, last backward span end]. Goal: >= 80%.
# The run's own exposed_comm_s / grad_sync_wait_s (metrics.jsonl) are printed
# as a cross-check of the exposed time, with where the exposed time goes
# (waiting for the other rank's backward, or communication after both ended)
# and, per rank, the CPU time and the time its threads were runnable but
# waiting for a CPU (/proc schedstat), to tell the communication from the
# scheduling.
#   shape b (default): 6 layers, 6 heads, 384 wide, 256 context (10.7M
#     parameters, 43 MB of gradients), global batch 16 (8 per rank),
#     buckets of 4 MiB (11 buckets)
#   shape a: the default job's 4 layers, 4 heads, 128 wide, 128 context (0.8M
#     parameters, 3.3 MB), global batch 32, buckets of 0.5 MiB (7 buckets)
# A benchmark, not a test: it prints figures, it does not pass or fail.
# Results are recorded in docs/benchmarks.md ("Data parallelism (issue 3)").
#
# Usage: bench/dp_overlap.sh [--shape a|b] [--steps K] [--bucket-mb M] [--build-dir DIR]
#                            [--keep DIR] [--mpirun-args "ARGS"] [--same-session]
#   --steps K           training steps; steps 1-2 are left out (default 10)
#   --bucket-mb M       gradient bucket size (default 4 for b, 0.5 for a)
#   --build-dir DIR     where scaletrain is (built there, Release, if missing; default build)
#   --keep DIR          keep the run directory and the traces in DIR (open them in
#                       https://ui.perfetto.dev)
#   --mpirun-args ARGS  extra mpirun options (default none)
#   --same-session      start the ranks in mpirun's session (see Sessions below)
#
# Sessions: Linux's autogroup scheduling (enabled here: /proc/sys/kernel/sched_autogroup_enabled)
# gives each session an equal share of the CPU, so on a machine where other
# sessions are busy the 2 ranks of one mpirun would share about one session's
# share between them, while a single process gets it alone. Each rank is
# therefore started in its own session (setsid); --same-session turns that off. On an otherwise idle machine it changes nothing.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
cd "$root"

shape=b
steps=10
bucket_mb=""
build_dir=build
keep=""
mpirun_args=""
setsid_ranks=1
while [ $# -gt 0 ]; do
  case "$1" in
    --shape) shape="$2"; shift 2 ;;
    --steps) steps="$2"; shift 2 ;;
    --bucket-mb) bucket_mb="$2"; shift 2 ;;
    --build-dir) build_dir="$2"; shift 2 ;;
    --keep) keep="$2"; shift 2 ;;
    --mpirun-args) mpirun_args="$2"; shift 2 ;;
    --same-session) setsid_ranks=0; shift ;;
    -h|--help) awk 'NR > 1 && /^set -e/ { exit } NR > 1' "$0"; exit 0 ;;
    *) echo "error: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
case "$shape" in
  a) L=4 H=4 C=128 T=128 B=32 default_bucket=0.5 ;;
  b) L=6 H=6 C=384 T=256 B=16 default_bucket=4 ;;
  *) echo "error: unknown shape '$shape' (a or b)" >&2; exit 2 ;;
esac
bucket_mb="${bucket_mb:-$default_bucket}"
py=/usr/bin/python3

source "$here/lib.sh"
st_require_steps "$steps"
st_require_mpirun
st_build_and_data "$build_dir"

if [ -n "$keep" ]; then
  work="$keep"
  rm -rf "$work/run" "$work"/trace_*.json
  mkdir -p "$work"
else
  work="$(mktemp -d "${TMPDIR:-/tmp}/st_dp_overlap.XXXXXX")"
  trap 'rm -rf "$work"' EXIT
fi

cpu="$(lscpu | sed -n 's/^Model name: *//p' | head -1)"
echo "machine: ${cpu:-unknown CPU}, $(nproc) cores visible (2 ranks x 1 thread share them with" \
     "each rank's communication thread and anything else running);" \
     "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "scaletrain: $bin (checkout at $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo '?'))," \
     "$(mpirun --version 2>/dev/null | head -1)"
echo "run: shape $shape (${L} layers, ${H} heads, ${C} wide, context $T), global batch $B" \
     "(dp 2 x $((B / 2))), buckets of $bucket_mb MiB, $steps steps, 1 thread per rank," \
     "$([ "$setsid_ranks" = 1 ] && echo 'each rank in its own session' || echo 'ranks in one session')"

launch=()
[ "$setsid_ranks" = 0 ] || launch=(setsid -w)
# shellcheck disable=SC2086
mpirun -np 2 $mpirun_args "${launch[@]}" "$bin" train --config configs/shakespeare_char.toml \
  --set model.n_layer="$L" --set model.n_head="$H" --set model.n_embd="$C" \
  --set model.block_size="$T" \
  --set training.global_batch_size="$B" --set training.micro_batch_size="$((B / 2))" \
  --set parallel.dp=2 --set parallel.bucket_mb="$bucket_mb" \
  --set training.threads=1 --set training.steps="$steps" \
  --set training.eval_interval=0 --set training.sample_tokens=0 --set training.eval_steps=2 \
  --set checkpoint.interval=0 \
  --set data.train="\"$data_dir/train.bin\"" --set data.val="\"$data_dir/val.bin\"" \
  --run-dir "$work/run" --trace "$work/trace_%r.json" >"$work/train.log" 2>&1 &
launcher=$!

# While it runs: each rank's threads' CPU time and time spent runnable but
# waiting for a CPU (/proc/PID/task/TID/schedstat: run ns, wait ns, slices),
# the last values seen before the rank exits. Waiting is what other processes
# (and the rank's own communication thread, on the same core) cost it.
"$py" - "$launcher" "$work/run" >"$work/sched.txt" <<'EOF2' &
import os, sys, time
launcher, marker = int(sys.argv[1]), sys.argv[2]
seen = {}  # (rank, tid) -> (main thread?, run ns, wait ns)
def alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except OSError:
        return False
while alive(launcher):
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/comm") as f:
                if f.read().strip() != "scaletrain":
                    continue
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if marker.encode() not in f.read():
                    continue
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = dict(kv.split(b"=", 1) for kv in f.read().split(b"\0") if b"=" in kv)
            rank = int(env.get(b"OMPI_COMM_WORLD_RANK", b"-1"))
            for tid in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                    run_ns, wait_ns, _ = (int(x) for x in f.read().split())
                seen[(rank, tid)] = (tid == pid, run_ns, wait_ns)
        except (OSError, ValueError):
            continue
    time.sleep(0.05)
for rank in sorted({r for r, _ in seen}):
    main = [v for (r, _), v in seen.items() if r == rank and v[0]]
    other = [v for (r, _), v in seen.items() if r == rank and not v[0]]
    if main:
        print(f"rank {rank}: main thread {main[0][1] / 1e9:.2f} s on a CPU, "
              f"{main[0][2] / 1e9:.2f} s runnable but waiting for one; its {len(other)} other "
              f"threads (communication, MPI's) {sum(v[1] for v in other) / 1e9:.2f} s on a CPU")
EOF2
sampler=$!
wait "$launcher" || {
  echo "error: scaletrain train failed:" >&2; cat "$work/train.log" >&2; exit 1; }
wait "$sampler" || true
grep -m1 '^data parallel:' "$work/train.log" || true
echo

"$py" "$here/trace_overlap.py" --skip 2 --metrics "$work/run/metrics.jsonl" \
  "$work/trace_0.json" "$work/trace_1.json"
if [ -s "$work/sched.txt" ]; then
  echo "scheduling over the whole run ($steps steps, start-up and end included):"
  sed 's/^/  /' "$work/sched.txt"
fi
share=$("$py" "$here/trace_overlap.py" --skip 2 --json "$work/trace_0.json" "$work/trace_1.json" |
        "$py" -c 'import json,sys; print(json.load(sys.stdin)["all"]["share_hidden"])')
echo
"$py" -c "s=$share; print(f'share of gradient communication hidden behind backward (all ranks): {100*s:.1f}%  goal >= 80%: ' + ('met' if s >= 0.8 else 'NOT met'))"
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
[ -z "$keep" ] || echo "traces and run directory kept in $work"

#!/usr/bin/env bash
# Rebalancing against a slow rank (issue 18): dp = 2, rank 1 made 1.5x slower
# (faults.slow_ms = half of a micro-batch's measured compute, added to each of
# its micro-batches), once with uniform shares and once with
# parallel.rebalance; a clean run (no slow rank) is the reference. Prints the
# median step time and the idle time per step (a rank's step less its compute,
# from ranks.jsonl, the mean of the two ranks) over the steps after the first
# two windows, and the ratios. A benchmark, not a test.
#
# Usage: bench/rebalance.sh [--steps N] [--build-dir DIR]
set -eu
cd "$(dirname "$0")/.."
. bench/lib.sh
steps=60
build=build
while [ $# -gt 0 ]; do
  case $1 in
    --steps) steps=$2; shift 2 ;;
    --build-dir) build=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
[ "$steps" -ge 30 ] || { echo "error: --steps must be at least 30 (two windows of 10 are skipped)" >&2; exit 2; }
st_build_and_data "$build"
st_require_mpirun
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

args=(train --config configs/shakespeare_char.toml --quiet --set training.threads=1
  --set training.global_batch_size=32 --set training.micro_batch_size=2 --set parallel.dp=2
  --set training.eval_interval=0 --set training.eval_steps=1 --set training.sample_tokens=0
  --set checkpoint.interval=0 --set training.steps=$steps --set telemetry.rank_interval=10
  --set "data.train=\"$data_dir/train.bin\"" --set "data.val=\"$data_dir/val.bin\"")

figures() {  # RUN -> "median_step_ms idle_ms compute_rank0_ms compute_rank1_ms"
  python3 - "$1" <<'PY'
import json, statistics, sys
run = sys.argv[1]
steps = [json.loads(l) for l in open(run + "/metrics.jsonl")]
step = statistics.median(s["step_time_s"] for s in steps if s["step"] > 20)
w = [json.loads(l) for l in open(run + "/ranks.jsonl") if json.loads(l)["step"] > 20]
comp = lambda x: sum(x["phases"][k] for k in ("data_s", "forward_s", "backward_s", "optimizer_s"))
idle = statistics.mean(x["phases"]["step_s"] - comp(x) for x in w)
c = {r: statistics.mean(comp(x) for x in w if x["rank"] == r) for r in (0, 1)}
print("%.2f %.2f %.2f %.2f" % (step * 1e3, idle * 1e3, c[0] * 1e3, c[1] * 1e3))
PY
}

run() {  # NAME EXTRA... -> figures
  local name=$1
  shift
  mpirun -np 2 "$bin" "${args[@]}" "$@" --run-dir "$work/$name" >"$work/$name.out" 2>&1 ||
    { echo "error: $name run failed:" >&2; cat "$work/$name.out" >&2; exit 1; }
  figures "$work/$name"
}

read -r clean_step clean_idle c0 c1 < <(run clean)
slow_ms=$(echo "$c0 $c1" | awk '{printf "%.2f", ($1 + $2) / 2 / 8 * 0.5}')
echo "dp=2, 4 layers x 128 wide, context 128, 16 micro-batches of 2 a step (8 per rank), $steps steps"
echo "clean: ${clean_step} ms/step, idle ${clean_idle} ms/step; a micro-batch computes in $(echo "$c0 $c1" |
  awk '{printf "%.2f", ($1 + $2) / 2 / 8}') ms: rank 1 gets ${slow_ms} ms more per micro-batch (1.5x)"
read -r u_step u_idle u0 u1 < <(run uniform --set faults.slow_rank=1 --set faults.slow_ms="$slow_ms")
read -r r_step r_idle r0 r1 < <(run rebalanced --set faults.slow_rank=1 --set faults.slow_ms="$slow_ms" \
  --set parallel.rebalance=true)
echo "uniform:    ${u_step} ms/step, idle ${u_idle} ms/step (compute per step: rank 0 ${u0} ms, rank 1 ${u1} ms)"
echo "rebalanced: ${r_step} ms/step, idle ${r_idle} ms/step (compute per step: rank 0 ${r0} ms, rank 1 ${r1} ms)"
grep "^rebalance:" "$work/rebalanced.out" | sed 's/^/  /'
echo "$u_step $r_step $u_idle $r_idle $clean_step" | awk '{printf "step time uniform / rebalanced: %.2fx; idle uniform / rebalanced: %.1fx; rebalanced / clean step: %.2fx\n", $1 / $2, ($4 > 0 ? $3 / $4 : 0), $2 / $5}'

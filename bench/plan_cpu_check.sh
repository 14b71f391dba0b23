#!/usr/bin/env bash
# The planner predicting this machine's own training runs (issue 5): for each
# layout, `scaletrain bench` under the training's launch writes a profile,
# `scaletrain plan --train-config` predicts the step time from it, and a short
# `scaletrain train` measures it. Rounds alternate bench and training so that
# both see the same load; every round is printed, then the median error.
# Usage: bench/plan_cpu_check.sh [BUILD_DIR] [ROUNDS]   (timings: docs/planner.md)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
rounds=${2:-5}
bin=$build/scaletrain
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
data=$build/data/shakespeare_char
[ -f "$data/train.bin" ] || "$bin" data prepare --input "$root/data/tinyshakespeare.txt" --output "$data" >/dev/null
config=$root/configs/shakespeare_char.toml
sets=(--set "data.train=\"$data/train.bin\"" --set "data.val=\"$data/val.bin\"")
cores=$(nproc)
steps=12

echo "layout,round,predicted_step_s,measured_step_s,error_pct,gemm_tflops,hbm_gbps"
for r in $(seq 1 "$rounds"); do
  for dp in 1 2; do
    threads=$((cores / dp)); [ "$threads" -ge 1 ] || threads=1
    launcher=(); [ "$dp" -gt 1 ] && launcher=(mpirun -np "$dp")
    layout=(--set parallel.dp=$dp --set training.threads=$threads)
    "${launcher[@]}" "$bin" bench --output "$work/prof.toml" --name cpu --threads "$threads" \
      --config "$config" "${sets[@]}" --min-seconds 0.2 --max-allreduce-mb 16 >/dev/null
    "$bin" plan --train-config "$config" "${sets[@]}" "${layout[@]}" --hardware "$work/prof.toml" \
      --cluster cpu --json >"$work/plan.json"
    rm -rf "$work/run"
    "${launcher[@]}" "$bin" train --config "$config" "${sets[@]}" "${layout[@]}" --quiet --run-dir "$work/run" \
      --set training.steps=$steps --set training.eval_interval=0 --set training.eval_steps=1 \
      --set training.sample_tokens=0 --set checkpoint.interval=0 >/dev/null
    /usr/bin/python3 - "$work/plan.json" "$work/run/metrics.jsonl" "$work/prof.toml" "dp$dp" "$r" <<'PY'
import json, re, statistics, sys
plan = json.load(open(sys.argv[1]))
steps = [json.loads(l) for l in open(sys.argv[2])][2:]  # the first steps warm caches
measured = statistics.median(s["step_time_s"] for s in steps)
prof = open(sys.argv[3]).read()
tf = float(re.search(r"^fp32_tflops = ([0-9.e+-]+)", prof, re.M).group(1))
bw = float(re.search(r"^hbm_tbps = ([0-9.e+-]+)", prof, re.M).group(1)) * 1000
p = plan["step_time_s"]
print(f"{sys.argv[4]},{sys.argv[5]},{p:.4f},{measured:.4f},{100 * (p - measured) / measured:+.1f},{tf:.3f},{bw:.1f}")
PY
  done
done | tee "$work/rows.csv"
/usr/bin/python3 - "$work/rows.csv" <<'PY'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1]), fieldnames=["layout", "round", "pred", "meas", "err", "tf", "bw"]))
rows = [r for r in rows if r["layout"] != "layout"]
for lay in sorted({r["layout"] for r in rows}):
    errs = [float(r["err"]) for r in rows if r["layout"] == lay]
    print(f"{lay}: median error {statistics.median(errs):+.1f}% over {len(errs)} rounds "
          f"(range {min(errs):+.1f}% .. {max(errs):+.1f}%)")
PY

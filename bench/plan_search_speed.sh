#!/usr/bin/env bash
# Times `scaletrain plan --search` for Llama 3 405B on 16,384 H100s (every tp,
# pp, vpp, micro-batch, ZeRO stage and recompute combination), pinned to one
# core, and prints the layouts evaluated. Usage:
#   bench/plan_search_speed.sh [path/to/scaletrain] [repeats]
# Result recorded in docs/benchmarks.md ("Planner").
set -euo pipefail
bin=${1:-build/scaletrain}
reps=${2:-20}
root=$(cd "$(dirname "$0")/.." && pwd)
args=(plan --model llama3-405b --cluster dgx-h100 --gpus 16384 --search --json --config-dir "$root/configs")
pin=()
command -v taskset >/dev/null && pin=(taskset -c 0)
evaluated=$("${pin[@]}" "$bin" "${args[@]}" | python3 -c 'import json,sys; print(json.load(sys.stdin)["layouts_evaluated"])')
best=1e9
total=0
for _ in $(seq "$reps"); do
  t0=$(date +%s%N)
  "${pin[@]}" "$bin" "${args[@]}" >/dev/null
  t1=$(date +%s%N)
  ms=$(( (t1 - t0) / 1000000 ))
  total=$(( total + ms ))
  best=$(python3 -c "print(min($best, $ms))")
done
echo "llama3-405b on 16384 x h100-sxm: $evaluated layouts evaluated per search"
echo "wall time per search (whole process, one core): best ${best} ms, mean $(( total / reps )) ms over $reps runs"

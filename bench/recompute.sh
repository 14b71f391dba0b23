#!/usr/bin/env bash
# What activation recomputation (training.recompute, issue 22) costs a step
# and saves in memory: the same single-rank run with recompute none,
# selective and full, the three modes alternating in each of `--repeat`
# rounds so that machine noise falls on all of them alike. The figure is the
# median step time of steps 3..N (metrics.jsonl) over all of a mode's runs;
# the script prints each mode's median, its ratio to none, and the
# activation bytes of memory.json. A benchmark, not a test.
#
# Usage: bench/recompute.sh [--steps N] [--repeat R] [--threads T] [--build-dir DIR]
#                           [-- extra --set arguments for the model]
set -eu
cd "$(dirname "$0")/.."
. bench/lib.sh
steps=20
repeat=3
threads=2
build=build
extra=()
while [ $# -gt 0 ]; do
  case $1 in
    --steps) steps=$2; shift 2 ;;
    --repeat) repeat=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --build-dir) build=$2; shift 2 ;;
    --) shift; extra=("$@"); break ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
st_require_steps "$steps"
st_build_and_data "$build"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# A small GPT-2: 4 blocks, 128 wide, 4 heads, 256 tokens, 8 sequences a step.
args=(train --config configs/shakespeare_char.toml --quiet --set training.threads=$threads
  --set model.n_layer=4 --set model.n_embd=128 --set model.n_head=4 --set model.block_size=256
  --set training.global_batch_size=8 --set training.micro_batch_size=8
  --set training.eval_interval=0 --set training.eval_steps=1 --set training.sample_tokens=0
  --set checkpoint.interval=0 --set training.steps=$steps
  --set "data.train=\"$data_dir/train.bin\"" --set "data.val=\"$data_dir/val.bin\"" "${extra[@]}")

modes=(none selective full)
for r in $(seq 1 "$repeat"); do
  for mode in "${modes[@]}"; do
    "$bin" "${args[@]}" --set "training.recompute=\"$mode\"" --run-dir "$work/$mode-$r" >/dev/null
  done
done

python3 - "$work" "$repeat" "${modes[@]}" <<'PY'
import json, statistics, sys
work, repeat, modes = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
med, acts, losses = {}, {}, {}
for m in modes:
    t = []
    for r in range(1, repeat + 1):
        lines = [json.loads(l) for l in open(f"{work}/{m}-{r}/metrics.jsonl")]
        t += [j["step_time_s"] for j in lines if j["step"] >= 3]
        losses.setdefault(m, [j["loss"] for j in lines])
        acts[m] = json.load(open(f"{work}/{m}-{r}/memory.json"))["per_rank"]["activations_bytes"]
    med[m] = statistics.median(t)
for m in modes:
    print(f"{m:10s} step {1e3 * med[m]:8.2f} ms  x{med[m] / med['none']:.3f} of none   "
          f"activations {acts[m] / 2**20:7.2f} MiB  x{acts[m] / acts['none']:.3f}   "
          f"losses {'equal to none' if losses[m] == losses['none'] else 'DIFFER'}")
PY

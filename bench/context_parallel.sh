#!/usr/bin/env bash
# What context parallelism (parallel.cp, issue 34) costs a step against its
# peer on the same two ranks, data parallelism: the same model and global
# batch at dp 2, cp 2 (ring) and cp 2 (Ulysses), one thread per rank, the
# three layouts alternating in each of `--repeat` rounds so that machine
# noise falls on all of them alike. The figure is the median step time of
# steps 3..N (metrics.jsonl) over a layout's runs; the script prints each
# one's median, its ratio to dp 2's, the activation bytes per rank
# (memory.json) and the cp group's bytes per step. A benchmark, not a test.
#
# Usage: bench/context_parallel.sh [--steps N] [--repeat R] [--build-dir DIR]
#                                  [-- extra --set arguments for the model]
set -eu
cd "$(dirname "$0")/.."
. bench/lib.sh
steps=12
repeat=2
build=build
extra=()
while [ $# -gt 0 ]; do
  case $1 in
    --steps) steps=$2; shift 2 ;;
    --repeat) repeat=$2; shift 2 ;;
    --build-dir) build=$2; shift 2 ;;
    --) shift; extra=("$@"); break ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
st_require_steps "$steps"
st_build_and_data "$build"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

# A small GPT-2: 4 blocks, 128 wide, 4 heads, 256 tokens, 8 sequences a step
# in micro-batches of 4 (dp 2: one per rank; cp 2: two, each rank holding
# half of every sequence).
args=(train --config configs/shakespeare_char.toml --quiet --set training.threads=1
  --set model.n_layer=4 --set model.n_embd=128 --set model.n_head=4 --set model.block_size=256
  --set training.global_batch_size=8 --set training.micro_batch_size=4
  --set training.eval_interval=0 --set training.eval_steps=1 --set training.sample_tokens=0
  --set checkpoint.interval=0 --set training.steps=$steps
  --set "data.train=\"$data_dir/train.bin\"" --set "data.val=\"$data_dir/val.bin\"" "${extra[@]}")

layouts=(dp2 ring ulysses)
declare -A sets=([dp2]="--set parallel.dp=2" [ring]="--set parallel.cp=2"
  [ulysses]="--set parallel.cp=2 --set parallel.cp_impl=\"ulysses\"")
for r in $(seq 1 "$repeat"); do
  for l in "${layouts[@]}"; do
    eval "layout=(${sets[$l]})"
    mpirun --oversubscribe -np 2 "$bin" "${args[@]}" "${layout[@]}" --run-dir "$work/$l-$r" >/dev/null
  done
done

python3 - "$work" "$repeat" "${layouts[@]}" <<'PY'
import json, statistics, sys
work, repeat, layouts = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
med, acts, cp_bytes = {}, {}, {}
for l in layouts:
    t = []
    for r in range(1, repeat + 1):
        lines = [json.loads(x) for x in open(f"{work}/{l}-{r}/metrics.jsonl")]
        t += [j["step_time_s"] for j in lines if j["step"] >= 3]
        cp_bytes[l] = lines[-1].get("comm_bytes", {}).get("cp", 0)
        acts[l] = json.load(open(f"{work}/{l}-{r}/memory.json"))["per_rank"]["activations_bytes"]
    med[l] = statistics.median(t)
for l in layouts:
    print(f"{l:8s} step {1e3 * med[l]:8.2f} ms  x{med[l] / med['dp2']:.3f} of dp 2   "
          f"activations {acts[l] / 2**20:7.2f} MiB  x{acts[l] / acts['dp2']:.3f}   "
          f"cp bytes/step {cp_bytes[l] / 2**20:7.2f} MiB")
PY

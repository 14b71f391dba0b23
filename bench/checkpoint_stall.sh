#!/usr/bin/env bash
# How long a checkpoint stalls training: the same dp=4 run (6 layers, 6 heads,
# 384 wide, context 256, 10.8M parameters: 43 MB of parameters and 86 MB of
# AdamW moments) with a checkpoint every K steps and with none but the last;
# the stall per save is the wall-time difference divided by the number of
# extra saves. The peer is an older scaletrain (--baseline BIN: e.g. one
# built at commit 4b36eb7, whose checkpoints gather whole tensors to rank 0
# and write them synchronously) run the same way in the same session; the
# script prints both and their ratio. A benchmark, not a test.
#
# Usage: bench/checkpoint_stall.sh [--steps N] [--every K] [--repeat R] [--build-dir DIR]
#                                  [--baseline BIN --baseline-config TOML]
#   --baseline-config: the default config in the baseline's own syntax (an
#   older scaletrain may not know every key of configs/shakespeare_char.toml).
set -eu
cd "$(dirname "$0")/.."
. bench/lib.sh
steps=30
every=5
repeat=2
build=build
baseline=""
baseline_config=""
while [ $# -gt 0 ]; do
  case $1 in
    --steps) steps=$2; shift 2 ;;
    --every) every=$2; shift 2 ;;
    --repeat) repeat=$2; shift 2 ;;
    --build-dir) build=$2; shift 2 ;;
    --baseline) baseline=$2; shift 2 ;;
    --baseline-config) baseline_config=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
st_build_and_data "$build"
st_require_mpirun
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

shape=(--set model.n_layer=6 --set model.n_head=6 --set model.n_embd=384 --set model.block_size=256
  --set training.global_batch_size=16 --set training.micro_batch_size=4 --set training.threads=1
  --set training.eval_interval=0 --set training.eval_steps=1 --set training.sample_tokens=0
  --set training.steps=$steps --set parallel.dp=4 --set parallel.zero=1
  --set "data.train=\"$data_dir/train.bin\"" --set "data.val=\"$data_dir/val.bin\"")

# Wall seconds of one run (start-up included: the same in both runs).
wall() {  # wall BIN CONFIG INTERVAL
  rm -rf "$work/run"
  local t0 t1
  t0=$(date +%s.%N)
  mpirun --oversubscribe -np 4 "$1" train --config "$2" --quiet "${shape[@]}" \
    --set checkpoint.interval="$3" --run-dir "$work/run" >"$work/out" 2>&1 \
    || { echo "error: run failed:" >&2; cat "$work/out" >&2; exit 1; }
  t1=$(date +%s.%N)
  echo "$t0 $t1" | awk '{printf "%.3f", $2 - $1}'
}

saves=$(( (steps - 1) / every ))  # the extra ones: the final save happens in both runs
measure() {  # measure NAME BIN CONFIG -> prints the best stall per save over the repeats
  local best="" i with without stall
  for i in $(seq 1 "$repeat"); do
    with=$(wall "$2" "$3" "$every")
    without=$(wall "$2" "$3" 0)
    stall=$(echo "$with $without $saves" | awk '{printf "%.3f", ($1 - $2) / $3}')
    echo "  $1 run $i: ${with} s with a checkpoint every $every steps, ${without} s without: ${stall} s per save" >&2
    if [ -z "$best" ] || awk "BEGIN{exit !($stall < $best)}"; then best=$stall; fi
  done
  echo "$best"
}

echo "dp=4, 6 layers x 384 wide, $steps steps, a checkpoint every $every steps ($saves extra saves); best of $repeat"
new=$(measure scaletrain "$bin" configs/shakespeare_char.toml)
echo "scaletrain: ${new} s of training stall per save"
if [ -n "$baseline" ]; then
  old=$(measure baseline "$baseline" "${baseline_config:-configs/shakespeare_char.toml}")
  echo "baseline:   ${old} s of training stall per save"
  echo "$old $new" | awk '{if ($2 > 0) printf "ratio (baseline / scaletrain): %.1fx\n", $1 / $2; else print "ratio: scaletrain stalls not at all measurably"}'
fi

#!/usr/bin/env bash
# CPU training throughput: scaletrain against PyTorch (Debian's python3-torch,
# float32, same model, same step, same thread count), for two GPT-2 shapes:
#   (a) 4 layers, 4 heads, 128 wide, 128 context, batch 16  (the default job)
#   (b) 6 layers, 6 heads, 384 wide, 256 context, batch 8
# A benchmark, not a test: it prints figures, it does not pass or fail.
# Results are recorded in docs/benchmarks.md ("CPU training throughput vs PyTorch").
#
# Usage: bench/cpu_vs_torch.sh [--threads N] [--steps K] [--torch-steps K]
#                              [--build-dir DIR] [--shapes a,b] [--repeat R]
#   --threads N      threads for both (default 2)
#   --steps K        scaletrain steps per run; the first 2 are dropped, the
#                    median of the rest is reported (default 12)
#   --torch-steps K  PyTorch timed steps per run, after 2 untimed (default 6)
#   --build-dir DIR  where scaletrain is (built there, Release, if missing; default build)
#   --shapes LIST    which shapes to run (default a,b)
#   --repeat R       runs per implementation and shape, alternating; the best
#                    median is kept, which damps noise from other load (default 1)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
cd "$root"

threads=2
steps=12
torch_steps=6
build_dir=build
shapes=a,b
repeat=1
while [ $# -gt 0 ]; do
  case "$1" in
    --threads) threads="$2"; shift 2 ;;
    --steps) steps="$2"; shift 2 ;;
    --torch-steps) torch_steps="$2"; shift 2 ;;
    --build-dir) build_dir="$2"; shift 2 ;;
    --shapes) shapes="$2"; shift 2 ;;
    --repeat) repeat="$2"; shift 2 ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    *) echo "error: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
if [ "$steps" -lt 3 ]; then
  echo "error: --steps must be at least 3 (the first 2 steps are dropped)" >&2
  exit 2
fi

py=/usr/bin/python3  # Debian's python, where python3-torch installs
if ! "$py" -c 'import torch' 2>/dev/null; then
  echo "error: PyTorch not found for $py; install it: apt-get install python3-torch" >&2
  exit 1
fi

bin="$build_dir/scaletrain"
if [ ! -x "$bin" ]; then
  echo "building scaletrain (Release) in $build_dir ..." >&2
  cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build "$build_dir" --target scaletrain -j"$(nproc)" >&2
fi

data_dir="$build_dir/data/shakespeare_char"
if [ ! -f "$data_dir/train.bin" ] || [ ! -f "$data_dir/val.bin" ]; then
  echo "preparing Tiny Shakespeare in $data_dir ..." >&2
  "$bin" data prepare --input data/tinyshakespeare.txt --output "$data_dir" >&2
fi

work="$(mktemp -d "${TMPDIR:-/tmp}/st_cpu_vs_torch.XXXXXX")"
trap 'rm -rf "$work"' EXIT

# Median tokens/s of a run's metrics.jsonl, first 2 steps dropped.
median_tokens_per_s() {
  "$py" - "$1" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
vals = [r["tokens_per_s"] for r in rows if "tokens_per_s" in r][2:]
if not vals:
    sys.exit("no steps after the first 2 in " + sys.argv[1])
print(f"{statistics.median(vals):.1f}")
EOF
}

run_scaletrain() {  # layers heads embd ctx batch -> tokens/s
  local L=$1 H=$2 C=$3 T=$4 B=$5
  local dir="$work/st_${L}_${C}_$RANDOM"
  "$bin" train --config configs/shakespeare_char.toml \
    --set model.n_layer="$L" --set model.n_head="$H" --set model.n_embd="$C" \
    --set model.block_size="$T" \
    --set training.global_batch_size="$B" --set training.micro_batch_size="$B" \
    --set training.threads="$threads" --set training.steps="$steps" \
    --set training.eval_interval=0 --set training.sample_tokens=0 --set training.eval_steps=1 \
    --set checkpoint.interval=0 \
    --set data.train="\"$data_dir/train.bin\"" --set data.val="\"$data_dir/val.bin\"" \
    --run-dir "$dir" --quiet >"$work/st.log" 2>&1 || {
      echo "error: scaletrain train failed:" >&2; cat "$work/st.log" >&2; exit 1; }
  median_tokens_per_s "$dir/metrics.jsonl"
}

run_torch() {  # layers heads embd ctx batch -> tokens/s
  local L=$1 H=$2 C=$3 T=$4 B=$5
  "$py" "$here/torch_gpt_train.py" --n-layer "$L" --n-head "$H" --n-embd "$C" \
    --block-size "$T" --batch "$B" --threads "$threads" --steps "$torch_steps" --warmup 2 \
    >"$work/torch.json" 2>"$work/torch.log" || {
      echo "error: torch benchmark failed:" >&2; cat "$work/torch.log" >&2; exit 1; }
  "$py" -c 'import json,sys; print("%.1f" % json.load(open(sys.argv[1]))["tokens_per_s"])' "$work/torch.json"
}

best() { printf '%s\n' "$@" | sort -g | tail -1; }

cpu="$(lscpu | sed -n 's/^Model name: *//p' | head -1)"
echo "machine: ${cpu:-unknown CPU}, $(nproc) cores visible; threads $threads;" \
     "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "scaletrain: $bin ($(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo '?')); torch $("$py" -c 'import torch; print(torch.__version__)')"
echo "scaletrain: $steps steps (median of steps 3..$steps); torch: $torch_steps timed steps after 2 warmup"
echo
printf '| %-38s | %16s | %12s | %6s | %6s |\n' shape "scaletrain tok/s" "torch tok/s" ratio goal
printf '|%s|%s|%s|%s|%s|\n' "$(printf -- '-%.0s' {1..40})" "$(printf -- '-%.0s' {1..18})" \
  "$(printf -- '-%.0s' {1..14})" "$(printf -- '-%.0s' {1..8})" "$(printf -- '-%.0s' {1..8})"

IFS=, read -r -a wanted <<<"$shapes"
for s in "${wanted[@]}"; do
  case "$s" in
    a) L=4 H=4 C=128 T=128 B=16 goal=1.5 ;;
    b) L=6 H=6 C=384 T=256 B=8 goal=1.2 ;;
    *) echo "error: unknown shape '$s' (a or b)" >&2; exit 2 ;;
  esac
  st_runs=() torch_runs=()
  for ((r = 0; r < repeat; r++)); do
    st_runs+=("$(run_scaletrain $L $H $C $T $B)")
    torch_runs+=("$(run_torch $L $H $C $T $B)")
  done
  st=$(best "${st_runs[@]}")
  tr=$(best "${torch_runs[@]}")
  ratio=$("$py" -c "print(f'{$st / $tr:.2f}')")
  met=$("$py" -c "print('met' if $st / $tr >= $goal else 'NOT met')")
  label="($s) ${L}L ${H}H ${C}C ctx$T batch$B"
  printf '| %-38s | %16.0f | %12.0f | %6s | >=%s %s |\n' "$label" "$st" "$tr" "$ratio" "$goal" "$met"
done
echo
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"

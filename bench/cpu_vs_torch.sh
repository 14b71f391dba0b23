#!/usr/bin/env bash
# CPU training throughput: scaletrain against PyTorch (Debian's python3-torch,
# float32, same model, same step, same thread count), for two GPT-2 shapes:
#   (a) 4 layers, 4 heads, 128 wide, 128 context, batch 16  (the default job)
#   (b) 6 layers, 6 heads, 384 wide, 256 context, batch 8
# A benchmark, not a test: it prints figures, it does not pass or fail.
# Results are recorded in docs/benchmarks.md ("CPU training throughput vs PyTorch").
#
# Usage: bench/cpu_vs_torch.sh [--threads N] [--steps K] [--torch-steps K] [--build-dir DIR]
#                              [--shapes a,b] [--repeat R] [--wait-policies LIST]
#   --threads N      threads for both (default 2)
#   --steps K        scaletrain steps per run; the first 2 are dropped, the
#                    median of the rest is the run's figure (default 12)
#   --torch-steps K  PyTorch timed steps per run, after 2 untimed; median (default 6)
#   --build-dir DIR  where scaletrain is (built there, Release, if missing; default build)
#   --shapes LIST    which shapes to run (default a,b)
#   --repeat R       runs per implementation, shape and wait policy, interleaved;
#                    the best run is kept (default 1)
#   --wait-policies LIST  OMP_WAIT_POLICY values each side is run under, the
#                    best kept (default "default,PASSIVE"; "default" leaves it unset)
#
# Why wait policies: both sides are OpenMP programs. With the default policy
# an idle thread spins before sleeping; on a machine where other processes
# compete for the cores, a spinning thread can hold a core the thread it waits
# for needs, and throughput collapses (several-fold, both sides). PASSIVE
# sleeps at once: a little slower on an idle machine, far steadier on a busy
# one. Each side is shown at its best, with the policy that gave it, and the
# "busy" column says how much of the machine other processes used meanwhile.
# Each run starts in a session of its own (setsid): with autogrouping
# (/proc/sys/kernel/sched_autogroup_enabled) Linux shares the CPU equally
# between sessions, so this gives both sides the same share against whatever
# else runs, instead of the share of the shell that started the script.
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
policies=default,PASSIVE
while [ $# -gt 0 ]; do
  case "$1" in
    --threads) threads="$2"; shift 2 ;;
    --steps) steps="$2"; shift 2 ;;
    --torch-steps) torch_steps="$2"; shift 2 ;;
    --build-dir) build_dir="$2"; shift 2 ;;
    --shapes) shapes="$2"; shift 2 ;;
    --repeat) repeat="$2"; shift 2 ;;
    --wait-policies) policies="$2"; shift 2 ;;
    -h|--help) sed -n '2,32p' "$0"; exit 0 ;;
    *) echo "error: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
source "$here/lib.sh"
st_require_steps "$steps"
st_require_torch
st_build_and_data "$build_dir"

work="$(mktemp -d "${TMPDIR:-/tmp}/st_cpu_vs_torch.XXXXXX")"
trap 'rm -rf "$work"' EXIT

# Runs a command and appends to $work/busy the share of the machine's CPU
# time that OTHER processes used while it ran (all cores busy minus ours).
cat >"$work/measure.py" <<'EOF'
import os, resource, subprocess, sys, time
def busy():
    v = [int(x) for x in open("/proc/stat").readline().split()[1:9]]
    return sum(v) - v[3] - v[4]
b0, w0 = busy(), time.time()
rc = subprocess.call(sys.argv[2:])
b1, w1 = busy(), time.time()
ru = resource.getrusage(resource.RUSAGE_CHILDREN)
ours = ru.ru_utime + ru.ru_stime
others = max(0.0, (b1 - b0) / os.sysconf("SC_CLK_TCK") - ours) / ((w1 - w0) * os.cpu_count())
with open(sys.argv[1], "a") as f:
    f.write(f"{others:.3f}\n")
sys.exit(rc)
EOF

# env arguments for a wait policy ("default": leave OMP_WAIT_POLICY unset).
policy_env() { [ "$1" = default ] || echo "OMP_WAIT_POLICY=$1"; }

run_scaletrain() {  # policy layers heads embd ctx batch -> tokens/s
  local policy=$1 L=$2 H=$3 C=$4 T=$5 B=$6
  local dir="$work/st_${L}_${C}_$RANDOM"
  env $(policy_env "$policy") "$py" "$work/measure.py" "$work/busy" setsid -w \
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
  "$py" - "$dir/metrics.jsonl" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
vals = [r["tokens_per_s"] for r in rows if "tokens_per_s" in r][2:]
if not vals:
    sys.exit("no steps after the first 2 in " + sys.argv[1])
print(f"{statistics.median(vals):.1f}")
EOF
  rm -rf "$dir"
}

# Debian's torch calls the pthread build of OpenBLAS, which keeps its own
# thread pool sized to all cores unless told: OPENBLAS_NUM_THREADS gives the
# BLAS the same thread count as everything else.
run_torch() {  # policy layers heads embd ctx batch -> tokens/s
  local policy=$1 L=$2 H=$3 C=$4 T=$5 B=$6
  env OPENBLAS_NUM_THREADS="$threads" $(policy_env "$policy") \
    "$py" "$work/measure.py" "$work/busy" setsid -w \
    "$py" "$here/torch_gpt_train.py" --n-layer "$L" --n-head "$H" --n-embd "$C" \
    --block-size "$T" --batch "$B" --threads "$threads" --steps "$torch_steps" --warmup 2 \
    >"$work/torch.json" 2>"$work/torch.log" || {
      echo "error: torch benchmark failed:" >&2; cat "$work/torch.log" >&2; exit 1; }
  "$py" -c 'import json,sys; print("%.1f" % json.load(open(sys.argv[1]))["tokens_per_s"])' "$work/torch.json"
}

cpu="$(lscpu | sed -n 's/^Model name: *//p' | head -1)"
echo "machine: ${cpu:-unknown CPU}, $(nproc) cores visible; threads $threads;" \
     "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "scaletrain: $bin (tree at $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo '?'));" \
     "torch $("$py" -c 'import torch; print(torch.__version__)'), OPENBLAS_NUM_THREADS=$threads"
echo "per run: scaletrain $steps steps, median of steps 3..$steps; torch $torch_steps steps after 2" \
     "untimed, median; best of $repeat run(s) x wait policies {$policies}"
echo
printf '| %-30s | %-17s | %-15s | %6s | %-13s | %-18s |\n' \
  shape "scaletrain tok/s" "torch tok/s" ratio goal "busy (others' CPU)"
printf '|%s|%s|%s|%s|%s|%s|\n' "$(printf -- '-%.0s' {1..32})" "$(printf -- '-%.0s' {1..19})" \
  "$(printf -- '-%.0s' {1..17})" "$(printf -- '-%.0s' {1..8})" "$(printf -- '-%.0s' {1..15})" \
  "$(printf -- '-%.0s' {1..20})"

IFS=, read -r -a wanted <<<"$shapes"
IFS=, read -r -a policy_list <<<"$policies"
for s in "${wanted[@]}"; do
  case "$s" in
    a) L=4 H=4 C=128 T=128 B=16 goal=1.5 ;;
    b) L=6 H=6 C=384 T=256 B=8 goal=1.2 ;;
    *) echo "error: unknown shape '$s' (a or b)" >&2; exit 2 ;;
  esac
  : >"$work/busy"
  st=0 st_pol=- tr=0 tr_pol=-
  for ((r = 0; r < repeat; r++)); do
    for pol in "${policy_list[@]}"; do
      v=$(run_scaletrain "$pol" $L $H $C $T $B)
      if "$py" -c "import sys; sys.exit(0 if $v > $st else 1)"; then st=$v st_pol=$pol; fi
      v=$(run_torch "$pol" $L $H $C $T $B)
      if "$py" -c "import sys; sys.exit(0 if $v > $tr else 1)"; then tr=$v tr_pol=$pol; fi
    done
  done
  ratio=$("$py" -c "print(f'{$st / $tr:.2f}')")
  met=$("$py" -c "print('met' if $st / $tr >= $goal else 'NOT met')")
  busy=$("$py" -c "import sys; v=[float(x) for x in open(sys.argv[1])]; print(f'{100*min(v):.0f}-{100*max(v):.0f}%')" "$work/busy")
  label="($s) ${L}L ${H}H ${C}C ctx$T b$B"
  printf '| %-30s | %-17s | %-15s | %6s | %-13s | %-18s |\n' "$label" \
    "$(printf '%.0f' "$st") ($st_pol)" "$(printf '%.0f' "$tr") ($tr_pol)" "$ratio" ">=$goal $met" "$busy"
done
echo
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"

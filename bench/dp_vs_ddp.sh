#!/usr/bin/env bash
# Data-parallel training throughput: scaletrain (2 MPI ranks) against PyTorch
# DDP (gloo, 2 processes), the same GPT-2 model and global batch, 1 thread per
# rank, in one run. Shapes:
#   (a) 4 layers, 4 heads, 128 wide, 128 context; global batch 32 (16 per rank)
#       -- the default job (configs/shakespeare_char.toml)
#   (b) 6 layers, 6 heads, 384 wide, 256 context; global batch 16 (8 per rank)
# Both sides: one micro-batch per rank per step, gradient buckets of 25 MiB,
# AdamW (betas 0.9/0.95, weight decay 0.1 on matrices and embeddings), global
# norm clip 1.0, the loss averaged over the ranks every step. The peer is
# bench/torch_ddp_train.py (the model of tests/reference/torch_gpt.py),
# on Debian's python3-torch (1.13), not PyPI's wheel.
# A benchmark, not a test: it prints figures, it does not pass or fail.
# Results are recorded in docs/benchmarks.md ("Data parallelism (issue 3)").
#
# Usage: bench/dp_vs_ddp.sh [--shapes a,b] [--steps K] [--repeat R] [--build-dir DIR]
#                           [--mpirun-args "ARGS"] [--no-bind] [--same-session]
#   --shapes LIST       which shapes (default a,b)
#   --steps K           steps per run; tokens/s is the median over steps 3..K
#                       (scaletrain) and over K-2 steps after 2 warm-up (torch)
#                       (default 10)
#   --repeat R          runs per implementation and shape, alternating; the
#                       best median is kept, which damps noise from other load
#                       (default 2)
#   --build-dir DIR     where scaletrain is (built there, Release, if missing;
#                       default build)
#   --mpirun-args ARGS  extra mpirun options for scaletrain (default none)
#   --no-bind           let both float over the cores (mpirun --bind-to none;
#                       torch workers unpinned). By default mpirun binds its 2
#                       ranks to a core each, and the torch workers are pinned the
#                       same way (worker r to core r)
#   --same-session      start the ranks in mpirun's session (see Sessions below)
#
# Sessions: Linux's autogroup scheduling (enabled here: /proc/sys/kernel/sched_autogroup_enabled)
# gives each session an equal share of the CPU, so on a machine where other
# sessions are busy the 2 ranks of one mpirun would share about one session's
# share between them, while a single process gets it alone. Each rank is
# therefore started in its own session (setsid), scaletrain's and torch's alike;
# --same-session turns that off. On an otherwise idle machine it changes nothing.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
cd "$root"

shapes=a,b
steps=10
repeat=2
build_dir=build
mpirun_args=""
setsid_ranks=1
bind=1
while [ $# -gt 0 ]; do
  case "$1" in
    --shapes) shapes="$2"; shift 2 ;;
    --steps) steps="$2"; shift 2 ;;
    --repeat) repeat="$2"; shift 2 ;;
    --build-dir) build_dir="$2"; shift 2 ;;
    --mpirun-args) mpirun_args="$2"; shift 2 ;;
    --same-session) setsid_ranks=0; shift ;;
    --no-bind) bind=0; shift ;;
    -h|--help) awk 'NR > 1 && /^set -e/ { exit } NR > 1' "$0"; exit 0 ;;
    *) echo "error: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
source "$here/lib.sh"
st_require_steps "$steps"
st_require_torch gloo
st_require_mpirun
st_build_and_data "$build_dir"

work="$(mktemp -d "${TMPDIR:-/tmp}/st_dp_vs_ddp.XXXXXX")"
trap 'rm -rf "$work"' EXIT

# One line from a run's metrics.jsonl, first 2 steps dropped: median
# tokens/s, then the median forward, backward, gradient-sync wait and step ms.
scaletrain_figures() {
  "$py" - "$1" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()][2:]
if not rows:
    sys.exit("no steps after the first 2 in " + sys.argv[1])
med = lambda k: statistics.median(r[k] for r in rows)
print(f"{med('tokens_per_s'):.1f} {med('forward_s')*1e3:.1f} {med('backward_s')*1e3:.1f} "
      f"{med('grad_sync_wait_s')*1e3:.1f} {med('step_time_s')*1e3:.1f}")
EOF
}

run_scaletrain() {  # layers heads embd ctx global-batch -> figures line
  local L=$1 H=$2 C=$3 T=$4 B=$5
  local dir="$work/st_${L}_${C}_$RANDOM"
  local -a launch=() placement=()
  [ "$setsid_ranks" = 0 ] || launch=(setsid -w)
  [ "$bind" = 1 ] || placement=(--bind-to none)
  # shellcheck disable=SC2086
  mpirun -np 2 "${placement[@]}" $mpirun_args "${launch[@]}" "$bin" train --config configs/shakespeare_char.toml \
    --set model.n_layer="$L" --set model.n_head="$H" --set model.n_embd="$C" \
    --set model.block_size="$T" \
    --set training.global_batch_size="$B" --set training.micro_batch_size="$((B / 2))" \
    --set parallel.dp=2 --set parallel.bucket_mb=25 \
    --set training.threads=1 --set training.steps="$steps" \
    --set training.eval_interval=0 --set training.sample_tokens=0 --set training.eval_steps=2 \
    --set checkpoint.interval=0 \
    --set data.train="\"$data_dir/train.bin\"" --set data.val="\"$data_dir/val.bin\"" \
    --run-dir "$dir" --quiet >"$work/st.log" 2>&1 || {
      echo "error: scaletrain train failed:" >&2; cat "$work/st.log" >&2; exit 1; }
  scaletrain_figures "$dir/metrics.jsonl"
}

run_torch() {  # layers heads embd ctx global-batch -> figures line
  local L=$1 H=$2 C=$3 T=$4 B=$5
  local -a own=()
  [ "$setsid_ranks" = 0 ] || own+=(--setsid)
  [ "$bind" = 0 ] || own+=(--bind)
  OPENBLAS_NUM_THREADS=1 "$py" "$here/torch_ddp_train.py" --nproc 2 --threads 1 "${own[@]}" \
    --n-layer "$L" --n-head "$H" --n-embd "$C" --block-size "$T" \
    --global-batch "$B" --micro-batch "$((B / 2))" --bucket-mb 25 \
    --steps "$((steps - 2))" --warmup 2 >"$work/torch.json" 2>"$work/torch.log" || {
      echo "error: torch DDP benchmark failed:" >&2; cat "$work/torch.log" >&2; exit 1; }
  "$py" -c 'import json,sys; r=json.load(open(sys.argv[1]))
print("%.1f %.1f %.1f %.1f" % (r["tokens_per_s"], r["forward_ms_median"], r["backward_ms_median"], r["step_ms_median"]))' \
    "$work/torch.json"
}

# The line with the highest first field.
best_line() { printf '%s\n' "$@" | sort -g -k1,1 | tail -1; }

cpu="$(lscpu | sed -n 's/^Model name: *//p' | head -1)"
echo "machine: ${cpu:-unknown CPU}, $(nproc) cores visible (2 ranks x 1 thread share them with" \
     "each rank's communication thread and anything else running);" \
     "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "scaletrain: $bin (checkout at $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo '?'))," \
     "$(mpirun --version 2>/dev/null | head -1); torch $("$py" -c 'import torch; print(torch.__version__)') (Debian python3-torch), gloo"
echo "median tokens/s of steps 3..$steps per run; best of $repeat run(s) each, alternating;" \
     "$([ "$setsid_ranks" = 1 ] && echo 'each rank in its own session' || echo 'ranks in one session')," \
     "$([ "$bind" = 1 ] && echo 'rank r bound to core r' || echo 'ranks not bound')"
echo
printf '| %-34s | %16s | %16s | %6s | %-12s |\n' "shape (2 ranks x 1 thread)" "scaletrain tok/s" "torch DDP tok/s" ratio goal
printf '|%s|%s|%s|%s|%s|\n' "$(printf -- '-%.0s' {1..36})" "$(printf -- '-%.0s' {1..18})" \
  "$(printf -- '-%.0s' {1..18})" "$(printf -- '-%.0s' {1..8})" "$(printf -- '-%.0s' {1..14})"

details=()
IFS=, read -r -a wanted <<<"$shapes"
for s in "${wanted[@]}"; do
  case "$s" in
    a) L=4 H=4 C=128 T=128 B=32 ;;
    b) L=6 H=6 C=384 T=256 B=16 ;;
    *) echo "error: unknown shape '$s' (a or b)" >&2; exit 2 ;;
  esac
  st_runs=() torch_runs=()
  for ((r = 0; r < repeat; r++)); do
    st_runs+=("$(run_scaletrain $L $H $C $T $B)")
    torch_runs+=("$(run_torch $L $H $C $T $B)")
  done
  read -r st st_f st_b st_w st_step <<<"$(best_line "${st_runs[@]}")"
  read -r tr tr_f tr_b tr_step <<<"$(best_line "${torch_runs[@]}")"
  ratio=$("$py" -c "print(f'{$st / $tr:.2f}')")
  met=$("$py" -c "print('met' if $st / $tr >= 1.3 else 'NOT met')")
  label="($s) ${L}L ${H}H ${C}C ctx$T batch $B"
  printf '| %-34s | %16.0f | %16.0f | %6s | %-12s |\n' "$label" "$st" "$tr" "$ratio" ">=1.3 $met"
  st_all=$(printf '%s\n' "${st_runs[@]}" | awk '{printf "%s%.0f", (NR > 1 ? ", " : ""), $1}')
  tr_all=$(printf '%s\n' "${torch_runs[@]}" | awk '{printf "%s%.0f", (NR > 1 ? ", " : ""), $1}')
  details+=("($s) best runs, median ms per step: scaletrain forward $st_f, backward $st_b, gradient-sync wait $st_w, step $st_step; torch DDP forward $tr_f, backward (with DDP's exposed all-reduce) $tr_b, step $tr_step. Every run, tok/s: scaletrain $st_all; torch DDP $tr_all")
done
echo
for d in "${details[@]}"; do echo "$d"; done
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"

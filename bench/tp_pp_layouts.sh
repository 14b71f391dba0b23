#!/usr/bin/env bash
# Tensor and pipeline parallel layouts on this machine: the time of one
# training step for each (dp,tp,pp) layout of issue 4, split into compute,
# tensor-parallel communication, exposed data-parallel communication and
# pipeline wait (bubble + transfers), from the run's own timers
# (metrics.jsonl of rank 0, which is pipeline stage 0). The peer is the
# single-rank run of the same model and batch in the same session: each
# layout's speedup over it is printed. For pp > 1 the measured bubble,
# pipeline wait / compute on stage 0, is printed beside the theory for equal
# stages: (pp-1)/m for gpipe and 1f1b, (pp-1)/(vpp*m) for interleaved.
# One compute thread per rank; layouts with more ranks than cores time-share
# the cores (see docs/benchmarks.md for what that does to the figures).
# A benchmark, not a test: it prints figures, it does not pass or fail.
#
# Usage: bench/tp_pp_layouts.sh [--steps K] [--build-dir DIR] [--micro-batches M]
set -eu
cd "$(dirname "$0")/.."
. bench/lib.sh
steps=6
build=build
m=8
while [ $# -gt 0 ]; do
  case $1 in
    --steps) steps=$2; shift 2 ;;
    --build-dir) build=$2; shift 2 ;;
    --micro-batches) m=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
st_build_and_data "$build"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mb=4
common=(--config configs/shakespeare_char.toml --quiet
  --set model.n_layer=8 --set model.n_head=4 --set model.n_embd=128 --set model.block_size=64
  --set training.micro_batch_size=$mb --set training.threads=1 --set training.steps="$steps"
  --set training.eval_interval=0 --set training.eval_steps=1 --set training.sample_tokens=0
  --set checkpoint.interval=0 --set parallel.bucket_mb=1
  --set "data.train=\"$data_dir/train.bin\"" --set "data.val=\"$data_dir/val.bin\"")
echo "model: 8 layers, 4 heads, 128 wide, context 64; $m micro-batches of $mb per DP rank per step; $steps steps (first 2 left out)"
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
run() {  # run NAME DP TP PP SCHED VPP SP
  local name=$1 dp=$2 tp=$3 pp=$4 sched=$5 vpp=$6 sp=$7
  local dir=$work/$name
  local launch=()
  [ $((dp * tp * pp)) -gt 1 ] && launch=(mpirun -np $((dp * tp * pp)))
  "${launch[@]}" "$bin" train "${common[@]}" --set training.global_batch_size=$((mb * m * dp)) \
    --set parallel.dp="$dp" --set parallel.tp="$tp" --set parallel.pp="$pp" \
    --set "parallel.schedule=\"$sched\"" --set parallel.vpp="$vpp" --set parallel.sp="$sp" \
    --run-dir "$dir" >"$work/out" 2>&1 || { echo "$name failed:"; tail "$work/out"; return; }
  /usr/bin/python3 - "$dir/metrics.jsonl" "$name" "$dp" "$pp" "$vpp" "$m" "$sched" "$work/ref_s" <<'PY'
import json, os, sys
path, name, dp, pp, vpp, m, sched, ref_file = sys.argv[1:]
dp, pp, vpp, m = int(dp), int(pp), int(vpp), int(m)
rows = [json.loads(l) for l in open(path)][2:]
avg = lambda k: sum(r.get(k, 0.0) for r in rows) / len(rows)
step = avg("step_time_s")
tp_wait = avg("tp_comm_wait_s")
compute = avg("forward_s") + avg("backward_s") - tp_wait
dp_exposed = avg("grad_sync_wait_s")
pipe = avg("pipeline_wait_s")
other = step - compute - tp_wait - dp_exposed - pipe
# Throughput over the same tokens per DP rank: dp ranks do dp x the work.
if name == "1x1x1":
    open(ref_file, "w").write(str(step))
ref = float(open(ref_file).read())
speedup = ref * dp / step
line = (f"{name:<22} {step*1e3:8.1f} ms  x{speedup:5.2f}  compute {100*compute/step:5.1f}%  "
        f"tp {100*tp_wait/step:5.1f}%  dp {100*dp_exposed/step:5.1f}%  pipe {100*pipe/step:5.1f}%  "
        f"other {100*other/step:5.1f}%")
if pp > 1:
    theory = (pp - 1) / (m * (vpp if sched == "interleaved" else 1))
    line += f"  bubble {pipe/compute:.3f} (theory {theory:.3f})"
print(line)
PY
}
echo "layout (dp x tp x pp)     step        vs 1   shares of the step (rank 0 = stage 0)"
run 1x1x1 1 1 1 1f1b 1 false
run 1x2x1 1 2 1 1f1b 1 false
run 1x2x1-sp 1 2 1 1f1b 1 true
run 1x4x1 1 4 1 1f1b 1 false
run 1x1x2-gpipe 1 1 2 gpipe 1 false
run 1x1x2-1f1b 1 1 2 1f1b 1 false
run 1x1x2-interleaved2 1 1 2 interleaved 2 false
run 1x1x2-interleaved4 1 1 2 interleaved 4 false
run 1x1x4-1f1b 1 1 4 1f1b 1 false
run 1x1x4-interleaved2 1 1 4 interleaved 2 false
run 2x2x1 2 2 1 1f1b 1 false
run 2x1x2-1f1b 2 1 2 1f1b 1 false
run 1x2x2-1f1b 1 2 2 1f1b 1 false
run 2x2x2-1f1b 2 2 2 1f1b 1 false

#!/usr/bin/env bash
# Pipeline schedules side by side (issue 34): 1f1b, interleaved (vpp 2), zb-h1
# and zb-v at 4 stages (--pp 2: two), each measured (median step time and stage 0's
# pipeline wait over the steps after the first two) and predicted by
# `scaletrain plan` from a `scaletrain bench` profile taken under the same
# launch. With --cluster on the emulated cluster (scripts/cluster.sh: 4
# hosts, one rank each, a fixed CPU quota per host; root, and refused while
# other emulated hosts are up: the cluster is one per machine, and its
# `down` removes every st-h* host); otherwise 4 local mpirun ranks (said in
# the output). Rounds alternate the schedules so that each sees the same
# load; prints one line per run, then per schedule the medians and the
# ratios to 1f1b.
#   bench/pp_schedules.sh [--build DIR] [--rounds N] [--steps N] [--pp 2|4] [--cluster [--cpus C]]
# Results: docs/benchmarks.md, "Pipeline schedules".
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
build=build-bench
rounds=3
steps=8
cpus=""
use_cluster=0
pp=4
while [ $# -gt 0 ]; do
  case $1 in
    --build) build=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --cpus) cpus=$2; shift 2 ;;
    --cluster) use_cluster=1; shift ;;
    --pp) pp=$2; shift 2 ;;
    *) echo "error: unknown argument '$1'; usage: bench/pp_schedules.sh [--build DIR] [--rounds N] [--steps N] [--cluster [--cpus C]]" >&2; exit 2 ;;
  esac
done
st_require_steps "$steps"
st_require_mpirun
export OMPI_MCA_rmaps_base_oversubscribe=1 OMP_WAIT_POLICY=PASSIVE
st_build_and_data "$build"
work=$(mktemp -d)
cluster_dir=$work/cluster
trap 'if [ -f "$cluster_dir/hostfile" ]; then ST_CLUSTER_DIR="$cluster_dir" scripts/cluster.sh down >/dev/null 2>&1 || true; fi; rm -rf "$work"' EXIT

case $pp in 2|4) ;; *) echo "error: --pp must be 2 or 4 (8 blocks: 2 pp chunks for zb-v)" >&2; exit 2 ;; esac
launcher=(mpirun -np "$pp")
where="$pp local mpirun ranks on $(nproc) cores (no CPU quota)"
others=$(ip netns list 2>/dev/null | grep -c '^st-h' || true)
if [ "$use_cluster" -eq 1 ] && [ "$others" -gt 0 ]; then
  echo "error: $others emulated hosts (st-h*) are up already (another run's cluster); try later or drop --cluster" >&2
  exit 1
fi
if [ "$use_cluster" -eq 1 ]; then
  [ "$(id -u)" -eq 0 ] || { echo "error: --cluster needs root (network namespaces)" >&2; exit 1; }
  cpus=${cpus:-$(python3 -c "print(round($(nproc) / $pp, 2))")}
  ST_CLUSTER_DIR=$cluster_dir scripts/cluster.sh up "$pp" --cpus "$cpus" >"$work/cluster.log" 2>&1 \
    || { echo "error: cluster.sh up failed:"; cat "$work/cluster.log"; exit 1; }
  mapfile -t mpi_args < <(tr -s ' \n' '\n\n' <"$cluster_dir/mpirun.args" | sed '/^$/d')
  launcher=(mpirun "${mpi_args[@]}" -np "$pp")
  where="the emulated cluster: $pp hosts, 1 rank each, $cpus cores per host (scripts/cluster.sh)"
fi
echo "measured on $where"

config=configs/shakespeare_char.toml
sets=(--set "data.train=\"$data_dir/train.bin\"" --set "data.val=\"$data_dir/val.bin\"")
# 8 blocks 128 wide, 8 micro-batches of 4 x 64 tokens a step: each stage's
# forward of a micro-batch is milliseconds of compute, against a message of
# 4 x 64 x 128 floats.
model=(--set model.n_layer=8 --set model.n_head=4 --set model.n_embd=128 --set model.block_size=64
  --set training.micro_batch_size=4 --set training.global_batch_size=32 --set training.threads=1
  --set parallel.pp="$pp")
"${launcher[@]}" "$bin" bench --output "$work/prof.toml" --name emu --threads 1 --config "$config" \
  "${sets[@]}" --min-seconds 0.2 --max-allreduce-mb 4 >"$work/bench.log" 2>&1 \
  || { echo "error: bench failed:"; tail -20 "$work/bench.log"; exit 1; }

schedule_sets() {  # the --set arguments of a schedule
  case $1 in
    1f1b) echo "--set parallel.schedule=\"1f1b\" --set parallel.vpp=1" ;;
    interleaved) echo "--set parallel.schedule=\"interleaved\" --set parallel.vpp=2" ;;
    zb-h1) echo "--set parallel.schedule=\"zb-h1\" --set parallel.vpp=1" ;;
    zb-v) echo "--set parallel.schedule=\"zb-v\" --set parallel.vpp=2" ;;
  esac
}

echo "schedule,round,measured_step_s,predicted_step_s,measured_wait_share,predicted_bubble_share"
for r in $(seq 1 "$rounds"); do
  for sched in 1f1b interleaved zb-h1 zb-v; do
    read -r -a ss <<<"$(schedule_sets "$sched")"
    "$bin" plan --train-config "$config" "${sets[@]}" "${model[@]}" "${ss[@]}" --hardware "$work/prof.toml" \
      --cluster emu --json >"$work/plan.json"
    rm -rf "$work/run"
    "${launcher[@]}" "$bin" train --config "$config" "${sets[@]}" "${model[@]}" "${ss[@]}" --quiet \
      --run-dir "$work/run" --set training.steps="$steps" --set training.eval_interval=0 \
      --set training.eval_steps=1 --set training.sample_tokens=0 --set checkpoint.interval=0 \
      >"$work/train.log" 2>&1 || { echo "error: $sched did not train:"; tail -20 "$work/train.log"; exit 1; }
    python3 - "$work/plan.json" "$work/run/metrics.jsonl" "$sched" "$r" <<'PY'
import json, statistics, sys
plan = json.load(open(sys.argv[1]))
steps = [json.loads(l) for l in open(sys.argv[2])][2:]  # the first two warm caches
step = statistics.median(s["step_time_s"] for s in steps)
wait = statistics.median(s.get("pipeline_wait_s", 0.0) for s in steps)
t = plan["time_breakdown_s"]
pred = plan["step_time_s"]
print(f"{sys.argv[3]},{sys.argv[4]},{step:.4f},{pred:.4f},{wait / step:.3f},"
      f"{(t['bubble'] + t['pp_comm']) / pred:.3f}")
PY
  done
done | tee "$work/rows.csv"

python3 - "$work/rows.csv" <<'PY'
import csv, statistics, sys
rows = [r for r in csv.reader(open(sys.argv[1])) if r and r[0] != "schedule"]
med = {}
for s in ("1f1b", "interleaved", "zb-h1", "zb-v"):
    got = [r for r in rows if r[0] == s]
    med[s] = [statistics.median(float(r[i]) for r in got) for i in (2, 3, 4, 5)]
base = med["1f1b"]
print("schedule     measured step  predicted  error   measured wait  predicted bubble  step vs 1f1b (meas / pred)")
for s, (m, p, w, b) in med.items():
    print(f"{s:12s} {m:10.4f} s {p:9.4f} s {100 * (p - m) / m:+6.1f}%   {100 * w:9.1f}%      {100 * b:9.1f}%"
          f"        {m / base[0]:.3f} / {p / base[1]:.3f}")
PY

#!/usr/bin/env bash
# What the telemetry of issue 18 costs a step: the same dp = 2 run with it off
# (telemetry.rank_interval = 0, telemetry.flight_records = 0, no /metrics) and
# on (per-rank records and the straggler detector every `--interval` steps,
# the flight recorder, the Prometheus endpoint being scraped every 0.2 s),
# alternating off/on runs. The figure is the median step time of steps 3..N
# (metrics.jsonl), per run; the script prints each run, the medians and the
# overhead. A benchmark, not a test: the goal is at most 1%.
#
# Usage: bench/telemetry_overhead.sh [--steps N] [--repeat R] [--interval K] [--build-dir DIR]
set -eu
cd "$(dirname "$0")/.."
. bench/lib.sh
steps=60
repeat=3
interval=10
build=build
while [ $# -gt 0 ]; do
  case $1 in
    --steps) steps=$2; shift 2 ;;
    --repeat) repeat=$2; shift 2 ;;
    --interval) interval=$2; shift 2 ;;
    --build-dir) build=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
st_require_steps "$steps"
st_build_and_data "$build"
st_require_mpirun
work=$(mktemp -d)
scraper=""
trap '[ -n "$scraper" ] && kill $scraper 2>/dev/null; rm -rf "$work"' EXIT

args=(train --config configs/shakespeare_char.toml --quiet --set training.threads=1
  --set training.global_batch_size=32 --set training.micro_batch_size=8 --set parallel.dp=2
  --set training.eval_interval=0 --set training.eval_steps=1 --set training.sample_tokens=0
  --set checkpoint.interval=0 --set training.steps=$steps
  --set "data.train=\"$data_dir/train.bin\"" --set "data.val=\"$data_dir/val.bin\"")
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')

median_step() {  # median step_time_s of steps >= 3 in RUN/metrics.jsonl, in ms
  python3 - "$1/metrics.jsonl" <<'PY'
import json, statistics, sys
t = [json.loads(l)["step_time_s"] for l in open(sys.argv[1]) if json.loads(l)["step"] >= 3]
print("%.3f" % (1e3 * statistics.median(t)))
PY
}

run() {  # run on|off I -> median ms
  local dir="$work/$1-$2"
  local extra=(--set telemetry.rank_interval=0 --set telemetry.flight_records=0)
  if [ "$1" = on ]; then
    extra=(--set telemetry.rank_interval="$interval" --set telemetry.flight_records=256
      --set telemetry.metrics_port="$port" --set 'telemetry.metrics_address="127.0.0.1"')
    (while sleep 0.2; do curl -sf "http://127.0.0.1:$port/metrics" >/dev/null 2>&1 || true; done) &
    scraper=$!
  fi
  mpirun -np 2 "$bin" "${args[@]}" "${extra[@]}" --run-dir "$dir" >"$work/out" 2>&1 ||
    { echo "error: run failed:" >&2; cat "$work/out" >&2; exit 1; }
  if [ -n "$scraper" ]; then kill $scraper 2>/dev/null; wait $scraper 2>/dev/null || true; scraper=""; fi
  median_step "$dir"
}

echo "dp=2, 4 layers x 128 wide, context 128, 32 sequences a step, $steps steps; telemetry window $interval steps"
offs=() ons=()
for i in $(seq 1 "$repeat"); do
  off=$(run off "$i")
  on=$(run on "$i")
  echo "  run $i: off ${off} ms/step, on ${on} ms/step"
  offs+=("$off") ons+=("$on")
done
python3 - "${offs[*]}" "${ons[*]}" <<'PY'
import statistics, sys
off = statistics.median(map(float, sys.argv[1].split()))
on = statistics.median(map(float, sys.argv[2].split()))
print("median step: off %.3f ms, on %.3f ms; ratio on/off %.4f (telemetry overhead %+.2f%%)" % (off, on, on / off, (on / off - 1) * 100))
PY

#!/usr/bin/env bash
# The Prometheus endpoint (issue 18): a 2-rank run with telemetry.metrics_port
# serves /metrics on loopback while it trains; curl sees every metric name;
# a real Prometheus server (Debian's `prometheus`, started here on loopback and
# stopped at the end, also on failure) scrapes it, and a PromQL query through
# its HTTP API returns the step time. A port that is taken is one clear error.
# A start that fails on a taken port leaves nothing a plain retry trips on
# (issue 33).
# Usage: test_prometheus.sh PATH/TO/scaletrain REPO_ROOT
. "$(dirname "$0")/lib.sh"
st_cli_init "$@"
command -v mpirun >/dev/null || { echo "SKIP: mpirun not found (apt-get install openmpi-bin)"; exit 0; }
command -v curl >/dev/null || { echo "SKIP: curl not found (apt-get install curl)"; exit 0; }

pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; wait 2>/dev/null; rm -rf "$work"' EXIT
free_port() { $py -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

st_small_data 100000
port=$(free_port)
# Rank 0 is slowed by 10 ms a micro-batch so the run lasts long enough to be
# scraped (and is flagged a straggler).
st_tiny_train_args
args=("${tiny[@]}" --set parallel.dp=2 --set telemetry.rank_interval=5 --set faults.slow_rank=0
  --set faults.slow_ms=10 --set telemetry.metrics_address='"127.0.0.1"'
  --set telemetry.peak_tflops=1)
mpirun -np 2 "$bin" "${args[@]}" --set training.steps=4000 --set telemetry.metrics_port=$port \
  --run-dir "$work/run" >"$work/run.out" 2>&1 &
job=$!
pids+=($job)

metrics=""
for _ in $(seq 1 200); do
  metrics=$(curl -sf "http://127.0.0.1:$port/metrics") && echo "$metrics" | grep -q "^scaletrain_step [1-9]" && break
  sleep 0.1
done
missing=()
for name in 'scaletrain_step_seconds ' 'scaletrain_tokens_per_second ' 'scaletrain_loss ' 'scaletrain_grad_norm ' \
    'scaletrain_comm_exposed_seconds{group="dp"}' 'scaletrain_rank_step_seconds{rank="1",host=' \
    'scaletrain_memory_bytes{rank="1"}' 'scaletrain_straggler{rank="0",host=' '# TYPE scaletrain_step counter' \
    'scaletrain_mfu '; do
  echo "$metrics" | grep -qF "$name" || missing+=("$name")
done
[ ${#missing[@]} -eq 0 ] && pass=$((pass + 1)) || fail "/metrics lacks ${missing[*]}: $(echo "$metrics" | head -20)"

if ! command -v prometheus >/dev/null; then
  echo "SKIP (part): the prometheus server is not installed (apt-get install prometheus)"
else
  prom_port=$(free_port)
  cat >"$work/prom.yml" <<YML
global:
  scrape_interval: 1s
scrape_configs:
  - job_name: scaletrain
    static_configs:
      - targets: ['127.0.0.1:$port']
YML
  prometheus --config.file="$work/prom.yml" --web.listen-address=127.0.0.1:$prom_port \
    --storage.tsdb.path="$work/tsdb" >"$work/prom.log" 2>&1 &
  pids+=($!)
  value=""
  for _ in $(seq 1 60); do
    value=$(curl -sf "http://127.0.0.1:$prom_port/api/v1/query?query=scaletrain_step_seconds" |
      $py -c 'import json,sys; r=json.load(sys.stdin)["data"]["result"]; print(r[0]["value"][1] if r else "")' 2>/dev/null)
    [ -n "$value" ] && break
    sleep 0.5
  done
  if [ -n "$value" ] && $py -c "import sys; sys.exit(0 if 0 < float('$value') < 10 else 1)"; then
    echo "ok Prometheus scraped the run: scaletrain_step_seconds = $value"; pass=$((pass + 1))
  else
    fail "Prometheus returned no step time; targets: $(curl -s "http://127.0.0.1:$prom_port/api/v1/targets" | head -c 600)"
  fi
  # Every query of the shipped Grafana dashboard returns data from this run.
  sleep 2
  empty=$($py - "$root/deploy/grafana/scaletrain.json" "$prom_port" <<'PY'
import json, sys, urllib.parse, urllib.request
dash = json.load(open(sys.argv[1]))
empty = []
for panel in dash["panels"]:
    for t in panel["targets"]:
        q = t["expr"].replace('job=~"$job"', 'job="scaletrain"')
        url = "http://127.0.0.1:%s/api/v1/query?query=%s" % (sys.argv[2], urllib.parse.quote(q))
        if not json.load(urllib.request.urlopen(url))["data"]["result"]:
            empty.append(panel["title"] + ": " + q)
print("; ".join(empty))
PY
)
  [ -z "$empty" ] && pass=$((pass + 1)) || fail "Grafana dashboard queries with no data: $empty"
fi
kill -USR1 $job 2>/dev/null  # stop the run early (mpirun forwards SIGUSR1: checkpoint, exit 75)
wait $job

# A port that is taken (a listener held here): one clear error, no training.
port=$(free_port)
$py -c 'import socket,time,sys; s=socket.socket(); s.bind(("127.0.0.1", int(sys.argv[1]))); s.listen(); time.sleep(60)' \
  "$port" &
pids+=($!)
for _ in $(seq 1 50); do $py -c "import socket; socket.create_connection(('127.0.0.1', $port)).close()" 2>/dev/null && break; sleep 0.1; done
expect_error "cannot serve metrics on 127.0.0.1:$port: the port is taken" "${args[@]}" --set parallel.dp=1 \
  --set training.steps=5 --set telemetry.metrics_port=$port --run-dir "$work/taken"
# A run that never started leaves nothing a plain retry trips on.
[ ! -e "$work/taken" ] && pass=$((pass + 1)) || fail "the failed start left $(ls -A "$work/taken" | tr '\n' ' ')"
"$bin" "${args[@]}" --set parallel.dp=1 --set training.steps=5 --set telemetry.metrics_port=$(free_port) \
  --run-dir "$work/taken" >"$work/retry.out" 2>&1 && pass=$((pass + 1)) ||
  fail "a retry after a failed start: $(tail -3 "$work/retry.out")"

echo "$pass passed, $fails failed"
[ $fails -eq 0 ]

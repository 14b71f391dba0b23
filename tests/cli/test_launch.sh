#!/usr/bin/env bash
# The elastic launcher (`scaletrain launch`, issue 33):
#  - bad input (hostfile, flags, an etcd nobody runs, a layout no host count
#    allows) is one error naming the fix, exit 2, and no run directory;
#  - one launcher over a hostfile: a rank killed mid-run restarts the job
#    from the newest checkpoint, and the run's losses equal an uninterrupted
#    run's step for step; SIGTERM to the launcher (what Kubernetes sends)
#    ends in a checkpoint and exit 75, and the same command finishes the run
#    bitwise equal too; events.jsonl records each start, failure and stop;
#  - three emulated hosts (scripts/cluster.sh), a launcher inside each and
#    etcd on the cluster's bridge: a host whose link goes down is dropped,
#    the job restarts on the other two at dp 2 with the global batch kept;
#    the host comes back and the next failure (a killed rank) restarts on all
#    three; the run reaches training.steps with its final loss within 1% of
#    a single process's. Skips that part with one line where the machine
#    cannot (not root, no network namespaces, no etcd).
# Usage: test_launch.sh PATH/TO/scaletrain REPO_ROOT
. "$(dirname "$0")/lib.sh"
st_cli_init "$@"
command -v mpirun >/dev/null || { echo "SKIP: mpirun not found (apt-get install openmpi-bin)"; exit 0; }

st_small_data 100000
st_tiny_train_args
echo "localhost slots=2" >"$work/hosts2"

# expect_launch_error WHAT PATTERN LAUNCH_ARGS... (the run dir is $work/bad)
expect_launch_error() {
  local what=$1 pattern=$2
  shift 2
  "$bin" launch "$@" >"$work/out" 2>&1
  local rc=$?
  if [ $rc -eq 2 ] && grep -q -- "$pattern" "$work/out" && [ "$(grep -c '^error:' "$work/out")" -eq 1 ] &&
    [ ! -e "$work/bad" ]; then
    pass=$((pass + 1))
  else
    fail "$what: exit $rc, message: $(cat "$work/out")"
  fi
}
printf 'h0 slots=2\nh1 slots=0\n' >"$work/badslots"
bad_run=("${tiny[@]}" --run-dir "$work/bad")
expect_launch_error "slots=0" "line 2: 'slots=0' is not slots=K" --hostfile "$work/badslots" -- "${bad_run[@]}"
expect_launch_error "no hostfile" "cannot read the hostfile" --hostfile "$work/none" -- "${bad_run[@]}"
expect_launch_error "no run dir" "need --run-dir" --hostfile "$work/hosts2" -- "${tiny[@]}"
expect_launch_error "dp given" "remove --set parallel.dp=2" --hostfile "$work/hosts2" -- "${bad_run[@]}" --set parallel.dp=2
expect_launch_error "no train" "put it after --" --hostfile "$work/hosts2" -- sample --run-dir "$work/bad"
expect_launch_error "min hosts" "min-hosts 3: the hostfile has 1" --hostfile "$work/hosts2" --min-hosts 3 -- "${bad_run[@]}"
expect_launch_error "no etcd" "no etcd answers at http://127.0.0.1:1" --hostfile "$work/hosts2" --host localhost \
  --etcd http://127.0.0.1:1 -- "${bad_run[@]}"
echo "localhost slots=3" >"$work/hosts3"
expect_launch_error "no layout" "too few hosts: 1 of 1 answer.*at dp 3" --hostfile "$work/hosts3" -- "${bad_run[@]}"

# One launcher, two ranks on this machine.
steps=6000
run_args=("${tiny[@]}" --set training.steps=$steps --set checkpoint.interval=250 --set checkpoint.keep_last=2)
timeout 300 mpirun -np 2 "$bin" "${run_args[@]}" --set parallel.dp=2 --run-dir "$work/ref" >"$work/ref.out" 2>&1 ||
  { echo "FAIL: the uninterrupted run: $(tail -5 "$work/ref.out")"; exit 1; }

events() {  # events RUN: the event names in order, space-separated
  $py -c 'import json,sys; print(" ".join(json.loads(l)["event"] for l in open(sys.argv[1])))' "$1/events.jsonl"
}

"$bin" launch --hostfile "$work/hosts2" -- "${run_args[@]}" --run-dir "$work/killed" >"$work/killed.out" 2>&1 &
launcher=$!
if st_wait_records "$work/killed" 600 $launcher; then
  kill -9 "$(st_rank_pid "$work/killed" 1)"
  wait $launcher
  rc=$?
  if [ $rc -ne 0 ]; then
    fail "launch after a killed rank: exit $rc: $(tail -5 "$work/killed.out")"
  elif [ "$(events "$work/killed")" != "start failure start done" ]; then
    fail "killed rank: events $(events "$work/killed")"
  elif ! lost=$($py -c '
import json, sys
f = [json.loads(l) for l in open(sys.argv[1]) if "failure" in l][0]
ok = f["failed_hosts"] == [] and 0 <= f["steps_lost"] <= 250 and f["last_step"] - f["checkpoint_step"] == f["steps_lost"]
print(f["steps_lost"]); sys.exit(0 if ok else 1)' "$work/killed/events.jsonl"); then
    fail "killed rank: failure record $(grep failure "$work/killed/events.jsonl")"
  elif out=$(compare "$work/ref" "$work/killed"); then
    echo "ok killed rank: restarted, $lost step(s) redone; $out"
    pass=$((pass + 1))
  else
    fail "killed rank: losses differ from the uninterrupted run: $out"
  fi
else
  fail "killed rank: the run did not reach 600 steps: $(tail -5 "$work/killed.out")"
fi

"$bin" launch --hostfile "$work/hosts2" -- "${run_args[@]}" --run-dir "$work/term" >"$work/term.out" 2>&1 &
launcher=$!
if st_wait_records "$work/term" 600 $launcher; then
  kill -TERM $launcher
  wait $launcher
  rc=$?
  last=$(ls "$work/term/checkpoints" | tail -1)
  if [ $rc -ne 75 ] || [ "$(events "$work/term")" != "start stop_requested stopped" ] || [ "$last" = step_00006000 ]; then
    fail "SIGTERM to the launcher: exit $rc, events $(events "$work/term"), newest checkpoint $last: $(tail -5 "$work/term.out")"
  elif ! "$bin" launch --hostfile "$work/hosts2" -- "${run_args[@]}" --run-dir "$work/term" >"$work/term2.out" 2>&1; then
    fail "the launch after SIGTERM: $(tail -5 "$work/term2.out")"
  elif out=$(compare "$work/ref" "$work/term"); then
    echo "ok SIGTERM to the launcher: exit 75 with $last, continued to the end; $out"
    pass=$((pass + 1))
  else
    fail "SIGTERM then continue: losses differ: $out"
  fi
else
  fail "SIGTERM: the run did not reach 600 steps: $(tail -5 "$work/term.out")"
fi

# Across emulated hosts, membership in etcd.
skip_hosts() { echo "SKIP (hosts part): $1"; echo "$pass passed, $fails failed"; [ $fails -eq 0 ]; exit; }
[ "$(id -u)" -eq 0 ] || skip_hosts "the emulated cluster needs root"
command -v etcd >/dev/null || skip_hosts "etcd not found (apt-get install etcd-server)"
command -v ip >/dev/null && ip netns add st-probe 2>/dev/null || skip_hosts "this machine cannot create network namespaces"
ip netns delete st-probe
cluster="$root/scripts/cluster.sh"
export ST_CLUSTER_DIR="$work/cluster"
etcd_pid=
launchers=()
cleanup() {
  for p in "${launchers[@]}"; do kill -9 "$p" 2>/dev/null; done
  pkill -9 -f "scaletrain train.*$work/elastic" 2>/dev/null
  [ -z "$etcd_pid" ] || { kill -9 "$etcd_pid" 2>/dev/null; wait "$etcd_pid" 2>/dev/null; }
  "$cluster" down >/dev/null 2>&1
  rm -rf "$work"
}
trap cleanup EXIT
"$cluster" up 3 >"$work/up.out" 2>&1 || { fail "cluster up: $(cat "$work/up.out")"; exit 1; }
st_start_etcd "$work/etcd" "$work/etcd.log" || { fail "etcd did not start: $(tail -3 "$work/etcd.log")"; exit 1; }
url=$etcd_url

esteps=12000
elastic=("${tiny[@]}" --set training.steps=$esteps --set training.global_batch_size=12 --set training.micro_batch_size=2
  --set checkpoint.interval=500 --set checkpoint.keep_last=2 --set parallel.comm_timeout_s=60 --run-dir "$work/elastic")
for i in 0 1 2; do
  ip netns exec st-h$i "$bin" launch --hostfile "$ST_CLUSTER_DIR/hostfile" --mpirun-args-file "$ST_CLUSTER_DIR/mpirun.args" \
    --etcd "$url" --host st-h$i --ttl 4 --takeover-wait 15 -- "${elastic[@]}" >"$work/launch$i.out" 2>&1 &
  launchers+=($!)
done
wait_event() {  # wait_event PATTERN SECONDS: until events.jsonl has a line matching PATTERN
  local i
  for i in $(seq 1 $((10 * $2))); do
    grep -q -- "$1" "$work/elastic/events.jsonl" 2>/dev/null && return 0
    sleep 0.1
  done
  return 1
}
ehosts() { # the hosts of start number N (0-based)
  $py -c 'import json,sys; s=[json.loads(l) for l in open(sys.argv[1]) if "\"start\"" in l]; print(",".join(s[int(sys.argv[2])]["hosts"]), s[int(sys.argv[2])]["dp"])' \
    "$work/elastic/events.jsonl" "$1"
}
if ! st_wait_records "$work/elastic" 1000 || ! wait_event '"start"' 5; then
  fail "elastic: the job did not start on 3 hosts: $(tail -3 "$work"/launch*.out)"
else
  "$cluster" link st-h2 down >/dev/null
  down_at=$(date +%s.%N)
  if ! wait_event '"restart":1,"resume_step"' 90; then
    fail "elastic: no restart after st-h2's link went down: $(tail -3 "$work"/launch*.out)"
  else
    restart_s=$($py -c 'import json,sys; print(round([json.loads(l) for l in open(sys.argv[1]) if "\"start\"" in l][1]["t_s"] - float(sys.argv[2]), 1))' \
      "$work/elastic/events.jsonl" "$down_at")
    "$cluster" link st-h2 up >/dev/null
    # st-h2's launcher finds its lease expired and joins again.
    st_wait_etcd_host st-h2
    resumed=$(wc -l <"$work/elastic/metrics.jsonl")
    st_wait_records "$work/elastic" $((resumed + 300)) || true
    kill -9 "$(st_rank_pid "$work/elastic" 0)" 2>/dev/null
    wait_event '"restart":2,"resume_step"' 60 || fail "elastic: no restart after a killed rank"
  fi
fi
for p in "${launchers[@]}"; do
  for _ in $(seq 1 1800); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
done
codes=""
for p in "${launchers[@]}"; do wait "$p"; codes="$codes $?"; done
launchers=()
single=()
for a in "${elastic[@]}"; do single+=("${a/#$work\/elastic/$work/single}"); done
# One micro-batch of the same 12 sequences: the same steps, in a third of the time.
timeout 300 "$bin" "${single[@]}" --set training.micro_batch_size=12 >"$work/single.out" 2>&1 || fail "the single-process run"
if [ "$codes" != " 0 0 0" ]; then
  fail "elastic: launcher exit codes$codes: $(tail -4 "$work"/launch*.out)"
elif [ "$(events "$work/elastic")" != "start host_lost failure start failure start done" ]; then
  fail "elastic: events $(events "$work/elastic")"
elif [ "$(ehosts 0)" != "st-h0,st-h1,st-h2 3" ] || [ "$(ehosts 1)" != "st-h0,st-h1 2" ] || [ "$(ehosts 2)" != "st-h0,st-h1,st-h2 3" ]; then
  fail "elastic: layouts '$(ehosts 0)' '$(ehosts 1)' '$(ehosts 2)' (want 3 hosts, the two left, 3 again)"
elif ! grep -q '"failed_hosts":\["st-h2"\]' "$work/elastic/events.jsonl"; then
  fail "elastic: the first failure does not name st-h2: $(grep failure "$work/elastic/events.jsonl" | head -1)"
elif out=$($py - "$work/single/metrics.jsonl" "$work/elastic/metrics.jsonl" $esteps <<'PY'
import json, sys
a = [json.loads(l) for l in open(sys.argv[1])]
b = [json.loads(l) for l in open(sys.argv[2])]
steps = [r["step"] for r in b]
if steps != list(range(1, int(sys.argv[3]) + 1)):
    print(f"the elastic run's steps are not 1..{sys.argv[3]} once each"); sys.exit(1)
rel = abs(b[-1]["loss"] - a[-1]["loss"]) / a[-1]["loss"]
print(f"final loss {b[-1]['loss']:.4f} vs one process {a[-1]['loss']:.4f} ({100 * rel:.2f}%)")
sys.exit(0 if rel < 0.01 else 1)
PY
); then
  echo "ok elastic: st-h2 lost -> dp 2 on st-h0,st-h1 (restarted ${restart_s} s after the link went down) -> st-h2 back at the next restart -> dp 3; $out"
  pass=$((pass + 1))
else
  fail "elastic: $out"
fi
echo "$pass passed, $fails failed"
[ $fails -eq 0 ]

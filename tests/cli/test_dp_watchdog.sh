#!/usr/bin/env bash
# A rank of a data-parallel run is killed with SIGKILL mid-run. The launcher
# is told to keep the job alive (--enable-recovery), as some launchers do, so
# only scaletrain's watchdog can end it: the surviving rank must exit
# non-zero within the watchdog limit with a message that names the step, the
# collective and the group. Without --enable-recovery mpirun ends the job
# itself (checked too).
# Usage: test_dp_watchdog.sh PATH/TO/scaletrain REPO_ROOT
. "$(dirname "$0")/lib.sh"
st_cli_init "$@"

st_small_data 200000
args=(train --config "$root/configs/shakespeare_char.toml" --quiet
  --set model.n_layer=2 --set model.n_head=2 --set model.n_embd=32 --set model.block_size=32
  --set training.global_batch_size=8 --set training.micro_batch_size=4 --set training.threads=1
  --set training.steps=1000000 --set training.eval_interval=0 --set training.sample_tokens=0
  --set parallel.dp=2 --set parallel.comm_timeout_s=4
  --set "data.train=\"$work/data/train.bin\"" --set "data.val=\"$work/data/val.bin\"")

# The pid of the rank-1 process of the run writing into run dir $1.
rank1_pid() {
  local p
  for p in $(pgrep -f "^$bin train .*--run-dir $1"); do
    if tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=1"; then
      echo "$p"; return
    fi
  done
}

run_and_kill() {  # run_and_kill NAME [mpirun options...]
  local name=$1
  shift
  # report_exit.sh prints each rank's own exit code (mpirun --enable-recovery
  # exits 0 whatever its ranks did).
  mpirun "$@" -np 2 bash "$root/tests/mpi/report_exit.sh" "$bin" "${args[@]}" --run-dir "$work/$name" \
    >"$work/$name.out" 2>&1 &
  local launcher=$!
  local pid=""
  for _ in $(seq 100); do  # wait until training runs (metrics appear)
    [ -s "$work/$name/metrics.jsonl" ] && pid=$(rank1_pid "$work/$name") && [ -n "$pid" ] && break
    sleep 0.1
  done
  if [ -z "$pid" ]; then echo "FAIL $name: run did not start"; cat "$work/$name.out"; kill $launcher; return 1; fi
  local t0=$SECONDS
  kill -9 "$pid"
  # The watchdog limit is 4 s; allow start-up of the abort and tear-down.
  for _ in $(seq 150); do kill -0 $launcher 2>/dev/null || break; sleep 0.1; done
  if kill -0 $launcher 2>/dev/null; then
    echo "FAIL $name: job still running 15 s after the kill"; kill -9 $launcher; return 1
  fi
  wait $launcher
  echo "$name: launcher exit $?, ended $((SECONDS - t0)) s after the kill"
}

if run_and_kill recovery --enable-recovery; then
  # The survivor waits either in a DP collective or in the step boundary's
  # all-reduce on the world group, depending on when its peer died.
  if grep -qE "error: rank 0: watchdog: .*group '(dp|world)'.*step [0-9]+" "$work/recovery.out" &&
     grep -qE "rank 0 exit code [1-9]" "$work/recovery.out"; then
    pass=$((pass + 1))
  else
    echo "FAIL recovery: no non-zero exit with a watchdog message naming the collective, group and step:"; cat "$work/recovery.out"; fails=$((fails + 1))
  fi
else
  fails=$((fails + 1))
fi
if run_and_kill teardown; then pass=$((pass + 1)); else fails=$((fails + 1)); fi

echo "$pass passed, $fails failed"
[ $fails -eq 0 ]

#!/usr/bin/env bash
# Rebalancing (issue 18, parallel.rebalance) on 2 data-parallel ranks with
# rank 1 slowed (faults.slow_ms): the shares move towards rank 0 (a console
# line), the step gets faster, and the losses equal the uniform run's within
# 1e-6 relative (the same sequences each step: the sampler is a function of
# the step and the sequence index; gradients scaled by 1 / all micro-batches).
# Layouts it cannot serve are one clear error.
# Usage: test_rebalance.sh PATH/TO/scaletrain REPO_ROOT
. "$(dirname "$0")/lib.sh"
st_cli_init "$@"
command -v mpirun >/dev/null || { echo "SKIP: mpirun not found (apt-get install openmpi-bin)"; exit 0; }

st_small_data 100000
st_tiny_train_args
args=("${tiny[@]}" --set training.global_batch_size=16 --set training.micro_batch_size=2
  --set training.steps=30 --set telemetry.rank_interval=5 --set faults.slow_rank=1
  --set faults.slow_ms=10)

for mode in uniform rebalanced; do
  flag=false
  [ $mode = rebalanced ] && flag=true
  timeout 300 mpirun -np 2 "$bin" "${args[@]}" --set parallel.dp=2 --set parallel.rebalance=$flag \
    --run-dir "$work/$mode" >"$work/$mode.out" 2>&1 || fail "the $mode run failed: $(tail -3 "$work/$mode.out")"
done
grep -q "^rebalance: micro-batches per DP rank now [0-9]* (.* ms compute), [0-9]* (" "$work/rebalanced.out" &&
  pass=$((pass + 1)) || fail "no rebalance line: $(grep -v '^step' "$work/rebalanced.out" | head -5)"
if out=$($py - "$work" <<'PY'
import json, statistics, sys
a = [json.loads(l) for l in open(sys.argv[1] + "/uniform/metrics.jsonl")]
b = [json.loads(l) for l in open(sys.argv[1] + "/rebalanced/metrics.jsonl")]
assert len(a) == len(b) == 30, (len(a), len(b))
worst = max(abs(x["loss"] - y["loss"]) / abs(x["loss"]) for x, y in zip(a, b))
assert worst <= 1e-6, "losses differ by %.3g relative" % worst
gn = max(abs(x["grad_norm"] - y["grad_norm"]) / abs(x["grad_norm"]) for x, y in zip(a, b))
assert gn <= 1e-5, "gradient norms differ by %.3g relative" % gn
print("losses within %.2g relative" % worst)
PY
); then
  echo "ok $out"; pass=$((pass + 1))
else
  fail "rebalanced losses: $out"
fi

expect_error "parallel.rebalance needs parallel.pp = 1, parallel.cp = 1 and parallel.zero <= 1" "${args[@]}" \
  --set parallel.rebalance=true --set parallel.zero=2 --set faults.slow_rank=-1 --run-dir "$work/bad1"
expect_error "set telemetry.rank_interval > 0" "${args[@]}" --set parallel.rebalance=true \
  --set telemetry.rank_interval=0 --set faults.slow_rank=-1 --run-dir "$work/bad2"

echo "$pass passed, $fails failed"
[ $fails -eq 0 ]

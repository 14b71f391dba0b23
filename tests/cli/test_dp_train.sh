#!/usr/bin/env bash
# Data-parallel training equals single-rank training: for dp = 2 and 4, ZeRO
# 0, 1 and 2, gradient accumulation 1 and 4, 20 steps from the same seed give
# the single-rank losses and final parameters within 1e-5 relative, with the
# analytic byte counts and shard sizes. Also: world size mismatch.
# Usage: test_dp_train.sh PATH/TO/scaletrain REPO_ROOT
. "$(dirname "$0")/lib.sh"
st_cli_init "$@"

st_small_data 300000
common=(--config "$root/configs/shakespeare_char.toml" --quiet
  --set model.n_layer=2 --set model.n_head=2 --set model.n_embd=32 --set model.block_size=16
  --set training.micro_batch_size=2 --set training.threads=1 --set training.steps=20
  --set training.eval_interval=10 --set training.eval_steps=4 --set training.sample_tokens=0
  --set checkpoint.interval=0 --set parallel.bucket_mb=0.02
  --set "data.train=\"$work/data/train.bin\"" --set "data.val=\"$work/data/val.bin\"")

for dp in 2 4; do
  for accum in 1 4; do
    gbs=$((dp * 2 * accum))
    ref=$work/ref_$gbs
    if [ ! -d "$ref" ]; then
      "$bin" train "${common[@]}" --set training.global_batch_size=$gbs --run-dir "$ref" >/dev/null \
        || { echo "FAIL: single-rank reference gbs=$gbs"; fails=$((fails + 1)); continue; }
    fi
    for zero in 0 1 2; do
      run=$work/dp${dp}_a${accum}_z${zero}
      if ! timeout 300 mpirun -np $dp "$bin" train "${common[@]}" --set training.global_batch_size=$gbs \
          --set parallel.dp=$dp --set parallel.zero=$zero --run-dir "$run" >"$work/out" 2>&1; then
        echo "FAIL: dp=$dp zero=$zero accum=$accum did not train:"; cat "$work/out"; fails=$((fails + 1)); continue
      fi
      if out=$($py "$root/tests/cli/compare_runs.py" "$ref" "$run" --rtol 1e-5 --dp $dp --zero $zero --accum $accum); then
        pass=$((pass + 1)); echo "ok dp=$dp zero=$zero accum=$accum: $out" | head -1
      else
        echo "FAIL dp=$dp zero=$zero accum=$accum:"; echo "$out"; fails=$((fails + 1))
      fi
    done
  done
done

# A checkpoint written under ZeRO at dp=4 resumes at dp=2 (and on one rank):
# the whole optimizer state is in it.
mpirun -np 4 "$bin" train "${common[@]}" --set training.global_batch_size=8 --set parallel.dp=4 \
  --set parallel.zero=2 --set checkpoint.interval=10 --run-dir "$work/z_a" >/dev/null 2>&1
for dp in 1 2; do
  launcher=(); [ $dp -gt 1 ] && launcher=(mpirun -np $dp)
  "${launcher[@]}" "$bin" train "${common[@]}" --set training.global_batch_size=8 --set parallel.dp=$dp \
    --set parallel.zero=1 --resume "$work/z_a/checkpoints/step_00000010" --run-dir "$work/z_b$dp" >/dev/null 2>&1
  if $py - "$work/z_a" "$work/z_b$dp" <<'PY'
import json, sys
a = [json.loads(l) for l in open(sys.argv[1] + "/metrics.jsonl")][10:]
b = [json.loads(l) for l in open(sys.argv[2] + "/metrics.jsonl")]
assert len(a) == len(b) == 10, (len(a), len(b))
w = max(abs(x["loss"] - y["loss"]) / x["loss"] for x, y in zip(a, b))
print(f"resume at another dp: worst relative loss difference {w:.2e}")
sys.exit(0 if w < 1e-5 else 1)
PY
  then pass=$((pass + 1)); else echo "FAIL: ZeRO checkpoint resumed at dp=$dp"; fails=$((fails + 1)); fi
done

# World size must be dp x tp x pp.
if mpirun -np 3 "$bin" train "${common[@]}" --set training.global_batch_size=4 --set parallel.dp=2 \
    --run-dir "$work/bad" >"$work/out" 2>&1; then
  echo "FAIL: world size 3 with dp=2 was accepted"; fails=$((fails + 1))
elif grep -q "mpirun -np 2" "$work/out" && [ "$(grep -c '^error:' "$work/out")" -eq 1 ]; then
  pass=$((pass + 1))
else
  echo "FAIL: world size mismatch message:"; cat "$work/out"; fails=$((fails + 1))
fi
# dp must divide the global batch.
if "$bin" train "${common[@]}" --set training.global_batch_size=6 --set parallel.dp=4 --run-dir "$work/bad2" \
    >"$work/out" 2>&1; then
  echo "FAIL: gbs 6 with dp 4 accepted"; fails=$((fails + 1))
elif grep -q "multiple of micro_batch_size x dp" "$work/out"; then pass=$((pass + 1)); else
  echo "FAIL: dp/batch message:"; cat "$work/out"; fails=$((fails + 1)); fi

echo "$pass passed, $fails failed"
[ $fails -eq 0 ]

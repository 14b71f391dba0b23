#!/usr/bin/env bash
# ZeRO-3 (parallel.zero = 3: parameters sharded over the DP ranks, gathered
# layer by layer): for dp = 2 and 4, gradient accumulation 1 and 4, with
# training.recompute selective and full, with tp 2 (also with sp) and pp 2
# (1f1b, gpipe, with tp and sp), 20 steps from the same seed give the single-rank losses and final parameters within 1e-5 relative (as ZeRO 0-2
# in test_dp_train.sh), memory.json's parameter bytes are the 1/dp shard, the
# DP traffic holds at least the forward and backward gathers of every
# parameter (exactly: test_plan_vs_trainer.sh); a ZeRO-3 checkpoint resumes
# at ZeRO 0 and 1 on other dp, a ZeRO-2 one and a dp x tp ZeRO-3 one under
# ZeRO-3 at dp alone, a dp x pp ZeRO-3 one at ZeRO-0; a run with a text sample reads the whole model back; bad input: one clear error.
# Usage: test_zero3.sh PATH/TO/scaletrain REPO_ROOT
. "$(dirname "$0")/lib.sh"
st_cli_init "$@"

st_small_data 300000
# eval_steps 3 at dp 2 and 4: ranks without a validation batch of their own
# must still join every forward's gathers.
common=(--config "$root/configs/shakespeare_char.toml" --quiet
  --set model.n_layer=2 --set model.n_head=2 --set model.n_embd=30 --set model.block_size=16
  --set training.micro_batch_size=2 --set training.threads=1 --set training.steps=20
  --set training.eval_interval=10 --set training.eval_steps=3 --set training.sample_tokens=0
  --set checkpoint.interval=0
  --set "data.train=\"$work/data/train.bin\"" --set "data.val=\"$work/data/val.bin\"")
sel=(--set 'training.recompute="selective"')
full=(--set 'training.recompute="full"')

sp=(--set parallel.sp=true)
gpipe=(--set 'parallel.schedule="gpipe"')
# "dp tp pp accumulation [extra config ...]"
cases=("2 1 1 1" "2 1 1 4" "4 1 1 1" "4 1 1 4" "2 1 1 2 ${sel[*]}" "4 1 1 2 ${full[*]}" "2 2 1 1"
  "2 2 1 2 ${sp[*]} ${full[*]}" "2 1 2 2" "2 1 2 2 ${gpipe[*]} ${sel[*]}" "2 2 2 2 ${sp[*]}")
for c in "${cases[@]}"; do
  read -r dp tp pp accum extra <<<"$c"
  extra=($extra)
  gbs=$((dp * 2 * accum))
  ref=$work/ref_$gbs
  if [ ! -d "$ref" ]; then
    "$bin" train "${common[@]}" --set training.global_batch_size=$gbs --run-dir "$ref" >/dev/null \
      || { echo "FAIL: single-rank reference gbs=$gbs"; fails=$((fails + 1)); continue; }
  fi
  run=$work/dp${dp}_tp${tp}_pp${pp}_a${accum}_$pass$fails
  what="dp=$dp tp=$tp pp=$pp zero=3 accum=$accum ${extra[*]}"
  if ! timeout 300 mpirun -np $((dp * tp * pp)) "$bin" train "${common[@]}" --set training.global_batch_size=$gbs \
      --set parallel.dp=$dp --set parallel.tp=$tp --set parallel.pp=$pp --set parallel.zero=3 "${extra[@]}" \
      --run-dir "$run" >"$work/out" 2>&1; then
    echo "FAIL: $what did not train:"; cat "$work/out"
    fails=$((fails + 1)); continue
  fi
  # The byte and shard checks of compare_runs.py assume dp alone (tp, pp:
  # the per-rank bytes are test_plan_vs_trainer.sh's).
  checks=(--dp $dp --zero 3 --accum $accum)
  [ $((tp * pp)) -gt 1 ] && checks=()
  if out=$($py "$root/tests/cli/compare_runs.py" "$ref" "$run" --rtol 1e-5 "${checks[@]}"); then
    pass=$((pass + 1)); echo "ok $what: $out" | head -1
  else
    echo "FAIL $what:"; echo "$out"; fails=$((fails + 1))
  fi
done

# Memory really shrinks: ZeRO-3's parameter bytes per rank are ZeRO-2's / dp.
ztwo=$work/z2_dp4
timeout 300 mpirun -np 4 "$bin" train "${common[@]}" --set training.global_batch_size=8 --set parallel.dp=4 \
  --set parallel.zero=2 --set checkpoint.interval=10 --run-dir "$ztwo" >/dev/null 2>&1
zthree=$work/z3_dp4
timeout 300 mpirun -np 4 "$bin" train "${common[@]}" --set training.global_batch_size=8 --set parallel.dp=4 \
  --set parallel.zero=3 --set checkpoint.interval=10 --run-dir "$zthree" >/dev/null 2>&1
if $py - "$ztwo" "$zthree" <<'PY'
import json, sys
two, three = (json.load(open(d + "/memory.json"))["per_rank"] for d in sys.argv[1:3])
print(f"params per rank: ZeRO-2 {two['params_bytes']} B, ZeRO-3 {three['params_bytes']} B")
sys.exit(0 if three["params_bytes"] * 4 == two["params_bytes"] and three["grads_bytes"] == two["grads_bytes"] else 1)
PY
then pass=$((pass + 1)); else echo "FAIL: ZeRO-3 memory.json parameter bytes"; fails=$((fails + 1)); fi

# Checkpoints reshard: ZeRO-3 at dp 4 -> ZeRO-1 at dp 2 and one rank; ZeRO-2
# at dp 4 -> ZeRO-3 at dp 2. Steps 11-20 match the run that wrote it.
resume() {  # FROM_RUN DP ZERO NAME
  local launcher=(); [ "$2" -gt 1 ] && launcher=(timeout 300 mpirun -np "$2")
  "${launcher[@]}" "$bin" train "${common[@]}" --set training.global_batch_size=8 --set parallel.dp="$2" \
    --set parallel.zero="$3" --resume "$1/checkpoints/step_00000010" --run-dir "$work/$4" >"$work/out" 2>&1 \
    || { echo "FAIL: resume $4:"; cat "$work/out"; }
  if $py - "$1" "$work/$4" "$4" <<'PY'
import json, sys
a = [json.loads(l) for l in open(sys.argv[1] + "/metrics.jsonl")][10:]
b = [json.loads(l) for l in open(sys.argv[2] + "/metrics.jsonl")]
assert len(a) == len(b) == 10, (len(a), len(b))
w = max(abs(x["loss"] - y["loss"]) / x["loss"] for x, y in zip(a, b))
print(f"ok {sys.argv[3]}: worst relative loss difference {w:.2e}")
sys.exit(0 if w < 1e-5 else 1)
PY
  then pass=$((pass + 1)); else echo "FAIL: resume $4"; fails=$((fails + 1)); fi
}
resume "$zthree" 2 1 z3_to_dp2_z1
resume "$zthree" 1 0 z3_to_dp1_z0
resume "$ztwo" 2 3 z2_to_dp2_z3
# ZeRO-3 with tensor parallelism (dp 2 x tp 2) -> ZeRO-3 at dp 2 alone.
timeout 300 mpirun -np 4 "$bin" train "${common[@]}" --set training.global_batch_size=8 --set parallel.dp=2 \
  --set parallel.tp=2 --set parallel.zero=3 --set checkpoint.interval=10 --run-dir "$work/z3_tp" >/dev/null 2>&1
resume "$work/z3_tp" 2 3 z3_tp2_to_dp2_z3
# ZeRO-3 with pipeline parallelism (dp 2 x pp 2) -> ZeRO-0 at dp 2 alone.
timeout 300 mpirun -np 4 "$bin" train "${common[@]}" --set training.global_batch_size=8 --set parallel.dp=2 \
  --set parallel.pp=2 --set parallel.zero=3 --set checkpoint.interval=10 --run-dir "$work/z3_pp" >/dev/null 2>&1
resume "$work/z3_pp" 2 0 z3_pp2_to_dp2_z0

# The text sample at the end reads the whole model back from the checkpoint.
if timeout 300 mpirun -np 2 "$bin" train "${common[@]:0:2}" "${common[@]:3}" --set training.global_batch_size=4 \
    --set parallel.dp=2 --set parallel.zero=3 --set training.steps=2 --set training.sample_tokens=20 \
    --run-dir "$work/sample" >"$work/out" 2>&1 && grep -q -- "--- sample" "$work/out"; then
  pass=$((pass + 1))
else
  echo "FAIL: ZeRO-3 run with a text sample:"; cat "$work/out"; fails=$((fails + 1))
fi

# Bad input: one line naming parallel.zero and what to use instead.
st_tiny_train_args
expect_error "parallel.zero = 3 (parameters sharded) does not run with several chunks per stage" \
  "${tiny[@]}" --set parallel.zero=3 --set parallel.pp=2 --set parallel.vpp=2 \
  --set 'parallel.schedule="interleaved"' --set model.n_layer=4 --run-dir "$work/bad1"
expect_error "use parallel.zero = 2 with it, parallel.vpp = 1, or schedule" "${tiny[@]}" --set parallel.zero=3 \
  --set parallel.pp=2 --set parallel.vpp=2 --set model.n_layer=4 --run-dir "$work/bad2"
expect_error "parallel.zero must be 0, 1, 2 or 3" "${tiny[@]}" --set parallel.zero=4 --run-dir "$work/bad3"

echo "$pass passed, $fails failed"
[ $fails -eq 0 ]

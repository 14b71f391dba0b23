#!/usr/bin/env bash
# Tensor and pipeline parallelism train the same model as one rank: for the
# layouts (dp,tp,pp) = (1,2,1) (1,4,1) (1,1,2) (1,1,4) (2,2,1) (2,1,2) (1,2,2)
# (2,2,2), every pp > 1 layout under every schedule, sequence parallelism on
# and off where tp > 1, ZeRO 0/1/2 on the DP group, 10 steps give the
# single-rank loss at every step (and the same validation losses) within
# 1e-5 relative. Checkpoints written at one layout resume at another.
# Bad layouts end with one clear error.
# Llama blocks: the same comparisons in test_llama_train.sh.
# Usage: test_tp_pp_train.sh PATH/TO/scaletrain REPO_ROOT
. "$(dirname "$0")/lib.sh"
st_cli_init "$@"

st_small_data 300000
# 8 layers so that pp 4 x vpp 2 divides them; 4 heads for tp 4; 4
# micro-batches per DP rank (a multiple of pp, as interleaving needs).
common=(--config "$root/configs/shakespeare_char.toml" --quiet
  --set model.n_layer=8 --set model.n_head=4 --set model.n_embd=32 --set model.block_size=16
  --set training.micro_batch_size=2 --set training.threads=1 --set training.steps=10
  --set training.eval_interval=5 --set training.eval_steps=4 --set training.sample_tokens=0
  --set checkpoint.interval=5 --set checkpoint.keep_last=4 --set parallel.bucket_mb=0.02
  --set "data.train=\"$work/data/train.bin\"" --set "data.val=\"$work/data/val.bin\"")


for dp in 1 2; do
  "$bin" train "${common[@]}" --set training.global_batch_size=$((8 * dp)) --run-dir "$work/ref_dp$dp" >/dev/null \
    || { echo "FAIL: single-rank reference for dp=$dp"; exit 1; }
done
# Negative control: another initialisation must not pass the comparison.
"$bin" train "${common[@]}" --set training.global_batch_size=8 --set training.seed=7 --run-dir "$work/seed7" >/dev/null
if compare "$work/ref_dp1" "$work/seed7" >/dev/null; then
  echo "FAIL: the comparison accepts a run from another seed"; fails=$((fails + 1))
else
  pass=$((pass + 1))
fi

run_layout() {  # run_layout DP TP PP SCHEDULE VPP SP ZERO
  local dp=$1 tp=$2 pp=$3 sched=$4 vpp=$5 sp=$6 zero=$7
  local name="dp=$dp tp=$tp pp=$pp schedule=$sched vpp=$vpp sp=$sp zero=$zero"
  local run=$work/run_${dp}_${tp}_${pp}_${sched}_${sp}_${zero}
  if ! timeout 300 mpirun -np $((dp * tp * pp)) "$bin" train "${common[@]}" \
      --set training.global_batch_size=$((8 * dp)) --set parallel.dp=$dp --set parallel.tp=$tp \
      --set parallel.pp=$pp --set "parallel.schedule=\"$sched\"" --set parallel.vpp=$vpp \
      --set parallel.sp=$sp --set parallel.zero=$zero --run-dir "$run" >"$work/out" 2>&1; then
    echo "FAIL: $name did not train:"; tail -20 "$work/out"; fails=$((fails + 1)); return
  fi
  if out=$(compare "$work/ref_dp$dp" "$run"); then
    echo "ok $name: $out"; pass=$((pass + 1))
  else
    echo "FAIL: $name: $out"; fails=$((fails + 1))
  fi
}

k=0
for layout in "1 2 1" "1 4 1" "1 1 2" "1 1 4" "2 2 1" "2 1 2" "1 2 2" "2 2 2"; do
  set -- $layout
  dp=$1 tp=$2 pp=$3
  scheds="1f1b"
  [ "$pp" -gt 1 ] && scheds="gpipe 1f1b interleaved"
  sps="false"
  [ "$tp" -gt 1 ] && sps="false true"
  for sched in $scheds; do
    vpp=1
    [ "$sched" = interleaved ] && vpp=2
    for sp in $sps; do
      zero=0
      [ "$dp" -gt 1 ] && zero=$((k % 3))
      k=$((k + 1))
      run_layout $dp $tp $pp $sched $vpp $sp $zero
    done
  done
done

# Checkpoints hold whole tensors: the (2,2,2) run's step-5 checkpoint
# resumes on one rank, and the single rank's at (1,2,2) with sp, each
# continuing the single-rank run's losses.
big=$(ls -d "$work"/run_2_2_2_1f1b_true_* | head -1)
if "$bin" train "${common[@]}" --set training.global_batch_size=16 --resume "$big/checkpoints/step_00000005" \
    --run-dir "$work/resume_1" >"$work/out" 2>&1 && out=$(compare "$work/ref_dp2" "$work/resume_1" 6); then
  echo "ok (2,2,2) checkpoint -> 1 rank: $out"; pass=$((pass + 1))
else
  echo "FAIL: (2,2,2) checkpoint resumed on one rank: ${out:-}"; tail -5 "$work/out"; fails=$((fails + 1))
fi
if mpirun -np 4 "$bin" train "${common[@]}" --set training.global_batch_size=8 --set parallel.tp=2 \
    --set parallel.pp=2 --set parallel.sp=true --resume "$work/ref_dp1/checkpoints/step_00000005" \
    --run-dir "$work/resume_4" >"$work/out" 2>&1 && out=$(compare "$work/ref_dp1" "$work/resume_4" 6); then
  echo "ok 1 rank checkpoint -> (1,2,2) sp: $out"; pass=$((pass + 1))
else
  echo "FAIL: single-rank checkpoint resumed at (1,2,2): ${out:-}"; tail -5 "$work/out"; fails=$((fails + 1))
fi
# The checkpoint of a sharded run is a whole model: `sample` loads it.
if "$bin" sample --checkpoint "$big" --tokens 20 --prompt "ROMEO" >"$work/out" 2>&1; then
  pass=$((pass + 1))
else
  echo "FAIL: sample from a (2,2,2) checkpoint:"; cat "$work/out"; fails=$((fails + 1))
fi

# Bad layouts: one clear error each, before any rank starts training.
expect_train_error "tp not dividing n_head" "use tp in {1, 2, 4}" --set parallel.tp=3
expect_train_error "pp greater than n_layer" "pp x vpp <= 8" --set parallel.pp=16
expect_train_error "interleaved with layers not divisible" "divisible by pp x vpp" \
  --set parallel.pp=3 --set parallel.vpp=2 --set 'parallel.schedule="interleaved"' --set training.global_batch_size=6 \
  --set training.micro_batch_size=1
expect_train_error "vpp without interleaving" 'needs parallel.schedule = "interleaved"' --set parallel.pp=2 --set parallel.vpp=2
if mpirun -np 3 "$bin" train "${common[@]}" --set training.global_batch_size=8 --set parallel.tp=2 --set parallel.pp=2 \
    --run-dir "$work/bad" >"$work/out" 2>&1; then
  echo "FAIL: world size 3 for tp 2 x pp 2 accepted"; fails=$((fails + 1))
elif grep -q "mpirun -np 4" "$work/out" && [ "$(grep -c '^error:' "$work/out")" -eq 1 ]; then
  pass=$((pass + 1))
else
  echo "FAIL: world size mismatch message:"; cat "$work/out"; fails=$((fails + 1))
fi

echo "$pass passed, $fails failed"
[ $fails -eq 0 ]

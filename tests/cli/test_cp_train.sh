#!/usr/bin/env bash
# Context parallelism (parallel.cp) trains the same model as one rank: each
# sequence of 16 positions split over cp ranks (the load-balanced chunks),
# attention as a ring, gradients reduced over dp x cp. For cp 2 and 4, cp x
# tp (+ sp), cp x pp (1f1b, interleaved), dp x cp with ZeRO-1 and ZeRO-3,
# cp x tp x pp and cp x tp x pp x dp, Llama blocks (RoPE at each rank's
# positions, grouped-query attention) and the three recompute modes, 10
# steps give the single-rank loss at every step (and the same validation
# losses) within 1e-6 relative, and so does parallel.cp_impl = "ulysses" (cp 2
# and 4, with tp + sp, dp x cp under ZeRO-3, pp, Llama, recompute).
# Checkpoints reshard from a cp layout to one rank, from one rank to dp x cp
# under ZeRO-3 and from there to tp x pp; `sample` loads a cp checkpoint.
# metrics.jsonl counts the cp group's traffic. Bad layouts end with one clear
# error naming the keys.
# Usage: test_cp_train.sh PATH/TO/scaletrain REPO_ROOT
. "$(dirname "$0")/lib.sh"
st_cli_init "$@"

st_small_data 300000
common=(--config "$root/configs/shakespeare_char.toml" --quiet
  --set model.n_layer=4 --set model.n_head=4 --set model.n_embd=32 --set model.block_size=16
  --set training.micro_batch_size=2 --set training.threads=1 --set training.steps=10
  --set training.eval_interval=5 --set training.eval_steps=4 --set training.sample_tokens=0
  --set checkpoint.interval=5 --set checkpoint.keep_last=4 --set parallel.bucket_mb=0.02
  --set "data.train=\"$work/data/train.bin\"" --set "data.val=\"$work/data/val.bin\"")
llama=(--set 'model.arch="llama"' --set model.n_kv_head=2)
tol=1e-6

# References: one rank at 8 and 16 sequences a step, GPT-2 and Llama blocks.
for ref in "gpt 8" "gpt 16" "llama 8"; do
  set -- $ref
  arch=(); [ "$1" = llama ] && arch=("${llama[@]}")
  "$bin" train "${common[@]}" "${arch[@]}" --set training.global_batch_size=$2 --run-dir "$work/ref_$1_$2" \
    >/dev/null || { echo "FAIL: single-rank reference $ref"; exit 1; }
done
# Negative control: another initialisation must not pass the comparison.
"$bin" train "${common[@]}" --set training.global_batch_size=8 --set training.seed=7 --run-dir "$work/seed7" >/dev/null
if compare "$work/ref_gpt_8" "$work/seed7" 1 $tol >/dev/null; then
  echo "FAIL: the comparison accepts a run from another seed"; fails=$((fails + 1))
else
  pass=$((pass + 1))
fi

run_layout() {  # run_layout NAME REF NP ARGS...: trains and compares against REF
  local name=$1 ref=$2 np=$3
  shift 3
  local run=$work/run_$name
  if ! timeout 300 mpirun -np "$np" "$bin" train "${common[@]}" "$@" --run-dir "$run" >"$work/out" 2>&1; then
    echo "FAIL: $name did not train:"; tail -20 "$work/out"; fails=$((fails + 1)); return
  fi
  if out=$(compare "$work/$ref" "$run" 1 $tol); then
    echo "ok $name: $out"; pass=$((pass + 1))
  else
    echo "FAIL: $name: $out"; fails=$((fails + 1))
  fi
}

g8=(--set training.global_batch_size=8)
g16=(--set training.global_batch_size=16)
run_layout cp2 ref_gpt_8 2 "${g8[@]}" --set parallel.cp=2
run_layout cp4 ref_gpt_8 4 "${g8[@]}" --set parallel.cp=4
run_layout cp2_tp2_sp ref_gpt_8 4 "${g8[@]}" --set parallel.cp=2 --set parallel.tp=2 --set parallel.sp=true
run_layout cp2_pp2 ref_gpt_8 4 "${g8[@]}" --set parallel.cp=2 --set parallel.pp=2
run_layout cp2_pp2_interleaved ref_gpt_8 4 "${g8[@]}" --set parallel.cp=2 --set parallel.pp=2 \
  --set 'parallel.schedule="interleaved"' --set parallel.vpp=2
run_layout dp2_cp2_zero1 ref_gpt_16 4 "${g16[@]}" --set parallel.cp=2 --set parallel.dp=2 --set parallel.zero=1
run_layout dp2_cp2_zero3 ref_gpt_16 4 "${g16[@]}" --set parallel.cp=2 --set parallel.dp=2 --set parallel.zero=3
run_layout cp2_full ref_gpt_8 2 "${g8[@]}" --set parallel.cp=2 --set 'training.recompute="full"'
run_layout cp2_tp2_pp2 ref_gpt_8 8 "${g8[@]}" --set parallel.cp=2 --set parallel.tp=2 --set parallel.pp=2
run_layout cp2_tp2_pp2_dp2_zero1 ref_gpt_16 16 "${g16[@]}" --set parallel.cp=2 --set parallel.tp=2 \
  --set parallel.pp=2 --set parallel.dp=2 --set parallel.zero=1 --set parallel.sp=true
run_layout llama_cp2 ref_llama_8 2 "${g8[@]}" "${llama[@]}" --set parallel.cp=2
run_layout llama_cp4_selective ref_llama_8 4 "${g8[@]}" "${llama[@]}" --set parallel.cp=4 \
  --set 'training.recompute="selective"'
run_layout llama_cp2_tp2 ref_llama_8 4 "${g8[@]}" "${llama[@]}" --set parallel.cp=2 --set parallel.tp=2
# Ulysses: all-to-all from sequence to heads and back.
ul=(--set 'parallel.cp_impl="ulysses"')
run_layout ulysses_cp2 ref_gpt_8 2 "${g8[@]}" "${ul[@]}" --set parallel.cp=2
run_layout ulysses_cp4_selective ref_gpt_8 4 "${g8[@]}" "${ul[@]}" --set parallel.cp=4 --set 'training.recompute="selective"'
run_layout ulysses_cp2_tp2_sp_full ref_gpt_8 4 "${g8[@]}" "${ul[@]}" --set parallel.cp=2 --set parallel.tp=2 \
  --set parallel.sp=true --set 'training.recompute="full"'
run_layout ulysses_dp2_cp2_zero3 ref_gpt_16 4 "${g16[@]}" "${ul[@]}" --set parallel.cp=2 --set parallel.dp=2 --set parallel.zero=3
run_layout ulysses_llama_cp2_pp2 ref_llama_8 4 "${g8[@]}" "${ul[@]}" "${llama[@]}" --set parallel.cp=2 --set parallel.pp=2

# The ring's traffic and waits are the cp group's in metrics.jsonl (the
# planner's byte count is tests/cli/test_plan_vs_trainer.sh's).
if $py - "$work/run_cp2/metrics.jsonl" <<'PY'; then pass=$((pass + 1)); else echo "FAIL: cp metrics"; fails=$((fails + 1)); fi
import json, sys
for line in open(sys.argv[1]):
    j = json.loads(line)
    assert j["comm_bytes"]["cp"] > 0 and j["comm_calls"]["cp"] > 0 and "cp_comm_wait_s" in j, j
    assert j["comm_bytes"]["dp"] > 0  # the gradients over dp x cp = 2 ranks
PY

# Checkpoints reshard: cp 4's step-5 checkpoint resumes on one rank, and the
# single rank's at dp 2 x cp 2 under ZeRO-3, each continuing the reference.
if "$bin" train "${common[@]}" "${g8[@]}" --resume "$work/run_cp4/checkpoints/step_00000005" \
    --run-dir "$work/resume_1" >"$work/out" 2>&1 && out=$(compare "$work/ref_gpt_8" "$work/resume_1" 6 $tol); then
  echo "ok cp 4 checkpoint -> 1 rank: $out"; pass=$((pass + 1))
else
  echo "FAIL: cp 4 checkpoint resumed on one rank: ${out:-}"; tail -5 "$work/out"; fails=$((fails + 1))
fi
if mpirun -np 4 "$bin" train "${common[@]}" "${g16[@]}" --set parallel.cp=2 --set parallel.dp=2 --set parallel.zero=3 \
    --resume "$work/ref_gpt_16/checkpoints/step_00000005" --run-dir "$work/resume_4" >"$work/out" 2>&1 &&
    out=$(compare "$work/ref_gpt_16" "$work/resume_4" 6 $tol); then
  echo "ok 1 rank checkpoint -> dp 2 x cp 2 ZeRO-3: $out"; pass=$((pass + 1))
else
  echo "FAIL: single-rank checkpoint resumed at dp 2 x cp 2 ZeRO-3: ${out:-}"; tail -5 "$work/out"; fails=$((fails + 1))
fi

if mpirun -np 4 "$bin" train "${common[@]}" "${g16[@]}" --set parallel.tp=2 --set parallel.pp=2 \
    --resume "$work/run_dp2_cp2_zero3/checkpoints/step_00000005" --run-dir "$work/resume_tp_pp" >"$work/out" 2>&1 &&
    out=$(compare "$work/ref_gpt_16" "$work/resume_tp_pp" 6 $tol); then
  echo "ok dp 2 x cp 2 ZeRO-3 checkpoint -> tp 2 x pp 2: $out"; pass=$((pass + 1))
else
  echo "FAIL: dp 2 x cp 2 ZeRO-3 checkpoint resumed at tp 2 x pp 2: ${out:-}"; tail -5 "$work/out"; fails=$((fails + 1))
fi
# A cp checkpoint is a whole model: `sample` (one rank, any prompt length) loads it.
if "$bin" sample --checkpoint "$work/run_cp4" --tokens 20 --prompt "ROMEO" >"$work/out" 2>&1; then
  pass=$((pass + 1))
else
  echo "FAIL: sample from a cp 4 checkpoint:"; cat "$work/out"; fails=$((fails + 1))
fi

# Bad layouts: one clear error each, before any rank starts training.
expect_train_error "cp not cutting block_size into 2 cp chunks" "parallel.cp = 3 cuts each sequence.*model.block_size = 16" \
  --set parallel.cp=3
expect_train_error "cp 0" "parallel.cp must be positive" --set parallel.cp=0
expect_train_error "unknown cp_impl" "parallel.cp_impl = 'star' is unknown" --set 'parallel.cp_impl="star"'
expect_train_error "ulysses with heads cp does not divide" \
  'n_head / tp = 4 query heads over cp ranks (parallel.cp_impl = "ulysses", parallel.cp = 8' \
  "${ul[@]}" --set parallel.cp=8
expect_train_error "ulysses with key/value heads cp does not divide" \
  'model.n_kv_head = 2 leaves 2 (parallel.cp_impl = "ulysses", parallel.cp = 4' \
  "${ul[@]}" "${llama[@]}" --set parallel.cp=4
expect_train_error "cp with rebalancing" "parallel.rebalance needs parallel.pp = 1, parallel.cp = 1" \
  --set parallel.cp=2 --set parallel.rebalance=true
if mpirun -np 2 "$bin" train "${common[@]}" "${g8[@]}" --set parallel.cp=4 --run-dir "$work/bad" >"$work/out" 2>&1; then
  echo "FAIL: world size 2 for cp 4 accepted"; fails=$((fails + 1))
elif grep -q "dp x tp x pp x cp = 1 x 1 x 1 x 4 = 4; launch with mpirun -np 4" "$work/out" &&
    [ "$(grep -c '^error:' "$work/out")" -eq 1 ]; then
  pass=$((pass + 1))
else
  echo "FAIL: world size mismatch message:"; cat "$work/out"; fails=$((fails + 1))
fi

echo "$pass passed, $fails failed"
[ $fails -eq 0 ]

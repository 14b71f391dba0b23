#!/usr/bin/env bash
# Llama blocks (model.arch = "llama") train the same model at every layout as
# one rank, as test_tp_pp_train.sh checks for GPT-2: 10 steps give the
# single-rank loss at every step (and the same validation losses) within
# 1e-5 relative, for grouped-query attention with the key/value heads split
# over TP (n_kv_head 2, tp 2), replicated on every TP rank (n_kv_head 2,
# tp 4; multi-query n_kv_head 1, tp 2), with sequence parallelism, pipeline
# schedules (1f1b, gpipe, interleaved), ZeRO 1/2, recompute modes, tied and
# untied heads. Checkpoints reshard across layouts (replicated key/value
# heads included). Bad Llama settings end with one clear error.
# Usage: test_llama_train.sh PATH/TO/scaletrain REPO_ROOT
. "$(dirname "$0")/lib.sh"
st_cli_init "$@"

st_small_data 200000
# 4 layers (pp 2 x vpp 2), 4 heads for tp 4; 4 micro-batches per DP rank.
common=(--config "$root/configs/llama_shakespeare_char.toml" --quiet
  --set model.n_layer=4 --set model.n_head=4 --set model.n_embd=32 --set model.block_size=16
  --set model.ffn_hidden=48
  --set training.micro_batch_size=2 --set training.threads=1 --set training.steps=10
  --set training.eval_interval=5 --set training.eval_steps=4 --set training.sample_tokens=0
  --set checkpoint.interval=5 --set checkpoint.keep_last=4 --set parallel.bucket_mb=0.02
  --set "data.train=\"$work/data/train.bin\"" --set "data.val=\"$work/data/val.bin\"")


# References: (kv heads, tied) x dp.
ref() {  # ref NAME KV TIED DP
  "$bin" train "${common[@]}" --set model.n_kv_head=$2 --set model.tied_embeddings=$3 \
    --set training.global_batch_size=$((8 * $4)) --run-dir "$work/ref_$1" >"$work/out" 2>&1 \
    || { echo "FAIL: single-rank reference $1"; cat "$work/out"; exit 1; }
}
ref gqa 2 false 1
ref gqa_dp2 2 false 2
ref mqa_tied 1 true 1
ref mqa_tied_dp2 1 true 2

# Negative control: Llama and GPT-2 blocks (or another n_kv_head) differ.
"$bin" train "${common[@]}" --set model.n_kv_head=4 --set model.tied_embeddings=false \
  --set training.global_batch_size=8 --run-dir "$work/mha" >/dev/null
if compare "$work/ref_gqa" "$work/mha" >/dev/null; then
  echo "FAIL: the comparison accepts another n_kv_head"; fails=$((fails + 1))
else
  pass=$((pass + 1))
fi

run_layout() {  # run_layout REF KV TIED DP TP PP SCHEDULE VPP SP ZERO RECOMPUTE
  local ref=$1 kv=$2 tied=$3 dp=$4 tp=$5 pp=$6 sched=$7 vpp=$8 sp=$9 zero=${10} rc=${11}
  local name="kv=$kv tied=$tied dp=$dp tp=$tp pp=$pp $sched vpp=$vpp sp=$sp zero=$zero recompute=$rc"
  local run=$work/run_${kv}_${dp}_${tp}_${pp}_${sched}_${sp}_${zero}_$rc
  if ! timeout 300 mpirun -np $((dp * tp * pp)) "$bin" train "${common[@]}" \
      --set model.n_kv_head=$kv --set model.tied_embeddings=$tied \
      --set training.global_batch_size=$((8 * dp)) --set parallel.dp=$dp --set parallel.tp=$tp \
      --set parallel.pp=$pp --set "parallel.schedule=\"$sched\"" --set parallel.vpp=$vpp \
      --set parallel.sp=$sp --set parallel.zero=$zero --set "training.recompute=\"$rc\"" \
      --run-dir "$run" >"$work/out" 2>&1; then
    echo "FAIL: $name did not train:"; tail -20 "$work/out"; fails=$((fails + 1)); return
  fi
  if out=$(compare "$work/ref_$ref" "$run"); then
    echo "ok $name: $out"; pass=$((pass + 1))
  else
    echo "FAIL: $name: $out"; fails=$((fails + 1))
  fi
}

#          ref      kv tied  dp tp pp sched       vpp sp    zero recompute
run_layout gqa      2  false 1  2  1  1f1b        1   false 0    none       # kv heads split
run_layout gqa      2  false 1  2  1  1f1b        1   true  0    selective
run_layout gqa      2  false 1  4  1  1f1b        1   false 0    none       # kv heads replicated
run_layout gqa      2  false 1  4  1  1f1b        1   true  0    full
run_layout mqa_tied 1  true  1  2  1  1f1b        1   true  0    none       # multi-query, replicated
run_layout gqa      2  false 1  1  2  gpipe       1   false 0    none
run_layout mqa_tied 1  true  1  1  2  1f1b        1   false 0    selective  # tied head across stages
run_layout gqa      2  false 1  1  2  interleaved 2   false 0    full
run_layout gqa_dp2  2  false 2  1  1  1f1b        1   false 1    none
run_layout gqa_dp2  2  false 2  2  1  1f1b        1   true  2    none
run_layout gqa_dp2  2  false 2  2  2  1f1b        1   true  1    none
run_layout mqa_tied 1  true  1  2  2  interleaved 2   false 0    none
run_layout mqa_tied_dp2 1 true 2 2  1  1f1b        1   true  2    selective  # replicated kv, ZeRO-2
run_layout gqa_dp2  2  false 2  1  1  1f1b        1   false 3    none       # ZeRO-3
run_layout mqa_tied_dp2 1 true 2 2  1  1f1b        1   true  3    full       # ZeRO-3, replicated kv
run_layout gqa_dp2  2  false 2  1  2  1f1b        1   false 3    selective  # ZeRO-3 over stages

# Checkpoints hold whole tensors: the tp-4 run (replicated key/value heads)
# resumes on one rank, and the single rank's at tp 4 with sp.
src=$work/run_2_1_4_1_1f1b_false_0_none
if "$bin" train "${common[@]}" --set training.global_batch_size=8 --resume "$src/checkpoints/step_00000005" \
    --run-dir "$work/resume_1" >"$work/out" 2>&1 && out=$(compare "$work/ref_gqa" "$work/resume_1" 6); then
  echo "ok tp 4 checkpoint -> 1 rank: $out"; pass=$((pass + 1))
else
  echo "FAIL: tp 4 checkpoint resumed on one rank: ${out:-}"; tail -5 "$work/out"; fails=$((fails + 1))
fi
if mpirun -np 4 "$bin" train "${common[@]}" --set training.global_batch_size=8 --set parallel.tp=4 \
    --set parallel.sp=true --resume "$work/ref_gqa/checkpoints/step_00000005" \
    --run-dir "$work/resume_4" >"$work/out" 2>&1 && out=$(compare "$work/ref_gqa" "$work/resume_4" 6); then
  echo "ok 1 rank checkpoint -> tp 4 sp: $out"; pass=$((pass + 1))
else
  echo "FAIL: single-rank checkpoint resumed at tp 4: ${out:-}"; tail -5 "$work/out"; fails=$((fails + 1))
fi
# `sample` rebuilds the model from the manifest: untied (tp 4) and tied
# multi-query (tp 2, sp) checkpoints.
for ck in "$src" "$work/run_1_1_2_1_1f1b_true_0_none"; do
  if "$bin" sample --checkpoint "$ck" --tokens 20 --prompt "ROMEO" >"$work/out" 2>&1; then
    pass=$((pass + 1))
  else
    echo "FAIL: sample from Llama checkpoint $ck:"; cat "$work/out"; fails=$((fails + 1))
  fi
done
# The manifest records Llama's rope_theta, norm_eps and head tying: resuming
# with another is refused.
for change in model.rope_theta=500.0 model.norm_eps=1e-6 model.tied_embeddings=true; do
  if "$bin" train "${common[@]}" --set training.global_batch_size=8 --set "$change" \
      --resume "$work/ref_gqa/checkpoints/step_00000005" --run-dir "$work/bad_resume" >"$work/out" 2>&1; then
    echo "FAIL: resumed a Llama checkpoint with $change"; fails=$((fails + 1))
  elif grep -q "is for a different model" "$work/out"; then
    pass=$((pass + 1))
  else
    echo "FAIL: resume with $change message:"; cat "$work/out"; fails=$((fails + 1))
  fi
done

# Bad settings: one clear error each, naming the field, before training.
expect_train_error "n_kv_head not dividing n_head" "model.n_kv_head (3) does not divide model.n_head (4)" \
  --set model.n_kv_head=3
expect_train_error "ffn_hidden not divisible by tp" "does not divide the MLP width 50" \
  --set model.ffn_hidden=50 --set parallel.tp=4
expect_train_error "n_kv_head neither dividing nor divisible by tp" "model.n_kv_head = 4" \
  --set model.n_head=12 --set model.n_embd=48 --set model.n_kv_head=4 --set parallel.tp=6 \
  --set model.ffn_hidden=48
expect_train_error "rope_theta <= 0" "model.rope_theta must be > 0" --set model.rope_theta=0
expect_train_error "norm_eps <= 0" "model.norm_eps must be > 0" --set model.norm_eps=-1e-5
expect_train_error "odd head dimension" "needs an even head dimension" --set model.n_embd=36
expect_train_error "unknown arch" "model.arch = 'mamba' is unknown" --set 'model.arch="mamba"'
expect_train_error "gpt2 with grouped-query attention" 'set model.arch = "llama" for grouped-query' \
  --set 'model.arch="gpt2"' --set model.n_kv_head=2

echo "$pass passed, $fails failed"
[ $fails -eq 0 ]

#!/usr/bin/env bash
# Zero-bubble pipeline schedules (parallel.schedule = "zb-h1", and "zb-v"
# with its two chunks per stage in a V) train the same model as one rank: at
# pp 2 and 4, alone and with dp 2 under ZeRO-1 and ZeRO-3 (and zb-v under
# ZeRO-2), 10 steps give the single-rank loss at every step (and
# the same validation losses) within 1e-6 relative; zb-h1 gives the same
# losses, bit for bit, as 1f1b at the same layout (B then W adds what the
# fused backward adds, in the same micro-batch order). Checkpoints reshard to
# and from them. Bad combinations end with one clear error naming the keys.
# Usage: test_zero_bubble.sh PATH/TO/scaletrain REPO_ROOT
. "$(dirname "$0")/lib.sh"
st_cli_init "$@"

st_small_data 300000
# 8 layers for pp 4; 4 micro-batches per DP rank (as many as stages at pp 4).
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

train_layout() {  # train_layout RUN DP PP SCHEDULE ZERO [ARGS...]
  local run=$1 dp=$2 pp=$3 sched=$4 zero=$5 vpp=1
  shift 5
  [ "$sched" = zb-v ] && vpp=2
  timeout 300 mpirun -np $((dp * pp)) "$bin" train "${common[@]}" \
    --set training.global_batch_size=$((8 * dp)) --set parallel.dp=$dp --set parallel.pp=$pp \
    --set "parallel.schedule=\"$sched\"" --set parallel.vpp=$vpp --set parallel.zero=$zero "$@" \
    --run-dir "$run" >"$work/out" 2>&1
}

for layout in "zb-h1 1 2 0" "zb-h1 2 2 1" "zb-h1 2 2 3" "zb-h1 1 4 0" "zb-h1 2 4 1" "zb-h1 2 4 3" \
    "zb-v 1 2 0" "zb-v 2 2 1" "zb-v 2 2 3" "zb-v 1 4 0" "zb-v 2 4 1" "zb-v 2 4 2" "zb-v 2 4 3"; do
  set -- $layout
  sched=$1 dp=$2 pp=$3 zero=$4
  name="$sched dp=$dp pp=$pp zero=$zero"
  run=$work/${sched}_${dp}_${pp}_${zero}
  if ! train_layout "$run" $dp $pp $sched $zero; then
    echo "FAIL: $name did not train:"; tail -20 "$work/out"; fails=$((fails + 1)); continue
  fi
  if out=$(compare "$work/ref_dp$dp" "$run" 1 1e-6); then
    echo "ok $name: $out"; pass=$((pass + 1))
  else
    echo "FAIL: $name: $out"; fails=$((fails + 1))
  fi
done

# The step's time split names the W passes (part of backward_s) under
# zero-bubble schedules only.
if $py - "$work/zb-v_2_4_1/metrics.jsonl" "$work/ref_dp2/metrics.jsonl" <<'PY'
import json, sys
zb = [json.loads(l) for l in open(sys.argv[1])]
ref = [json.loads(l) for l in open(sys.argv[2])]
assert all(0 < r["weight_grad_s"] < r["backward_s"] for r in zb), zb[0]
assert not any("weight_grad_s" in r for r in ref)
PY
then pass=$((pass + 1)); else echo "FAIL: weight_grad_s in metrics.jsonl"; fails=$((fails + 1)); fi

# The same layout under 1f1b: identical losses, not merely close.
if train_layout "$work/one_2_2_1" 2 2 1f1b 1 && out=$(compare "$work/one_2_2_1" "$work/zb-h1_2_2_1" 1 0); then
  echo "ok zb-h1 = 1f1b bitwise at dp=2 pp=2 zero=1: $out"; pass=$((pass + 1))
else
  echo "FAIL: zb-h1 against 1f1b at dp=2 pp=2 zero=1: ${out:-}"; tail -5 "$work/out"; fails=$((fails + 1))
fi

# Checkpoints: zb-h1 and zb-v (dp 2, pp 4, ZeRO-3) at
# step 5 resume on one rank; the single rank's resumes under zb-h1 and zb-v
# at pp 4; zb-h1 (dp 2, pp 2, ZeRO-1) resumes interleaved at pp 2 vpp 2 with
# ZeRO-2, and zb-v (dp 2, pp 2) under zb-h1 at pp 4.
resume_check() {  # resume_check WHAT REF CHECKPOINT RUN CMD...
  local what=$1 ref=$2 ckpt=$3 run=$4
  shift 4
  if "$@" --resume "$ckpt" --run-dir "$run" >"$work/out" 2>&1 && out=$(compare "$ref" "$run" 6 1e-6); then
    echo "ok $what: $out"; pass=$((pass + 1))
  else
    echo "FAIL: $what: ${out:-}"; tail -5 "$work/out"; fails=$((fails + 1))
  fi
}
resume_check "zb-h1 (2,4,zero3) checkpoint -> 1 rank" "$work/ref_dp2" \
  "$work/zb-h1_2_4_3/checkpoints/step_00000005" "$work/resume_1" \
  "$bin" train "${common[@]}" --set training.global_batch_size=16
resume_check "1 rank checkpoint -> zb-h1 pp 4" "$work/ref_dp1" \
  "$work/ref_dp1/checkpoints/step_00000005" "$work/resume_zb4" \
  mpirun -np 4 "$bin" train "${common[@]}" --set training.global_batch_size=8 --set parallel.pp=4 \
  --set 'parallel.schedule="zb-h1"'
resume_check "zb-h1 (2,2,zero1) checkpoint -> interleaved (2,2,zero2)" "$work/ref_dp2" \
  "$work/zb-h1_2_2_1/checkpoints/step_00000005" "$work/resume_il" \
  mpirun -np 4 "$bin" train "${common[@]}" --set training.global_batch_size=16 --set parallel.dp=2 \
  --set parallel.pp=2 --set parallel.vpp=2 --set 'parallel.schedule="interleaved"' --set parallel.zero=2

resume_check "zb-v (2,4,zero3) checkpoint -> 1 rank" "$work/ref_dp2" \
  "$work/zb-v_2_4_3/checkpoints/step_00000005" "$work/resume_v1" \
  "$bin" train "${common[@]}" --set training.global_batch_size=16
resume_check "1 rank checkpoint -> zb-v pp 4" "$work/ref_dp1" \
  "$work/ref_dp1/checkpoints/step_00000005" "$work/resume_v4" \
  mpirun -np 4 "$bin" train "${common[@]}" --set training.global_batch_size=8 --set parallel.pp=4 \
  --set parallel.vpp=2 --set 'parallel.schedule="zb-v"'
resume_check "zb-v (2,2,zero1) checkpoint -> zb-h1 (2,4,zero1)" "$work/ref_dp2" \
  "$work/zb-v_2_2_1/checkpoints/step_00000005" "$work/resume_vh" \
  mpirun -np 8 "$bin" train "${common[@]}" --set training.global_batch_size=16 --set parallel.dp=2 \
  --set parallel.pp=4 --set 'parallel.schedule="zb-h1"' --set parallel.zero=1

# Bad combinations: one clear error each, naming the keys.
expect_train_error "zb-h1 with full recompute" 'training.recompute = "full"' \
  --set parallel.pp=2 --set 'parallel.schedule="zb-h1"' --set 'training.recompute="full"'
expect_train_error "zb-h1 with vpp 2" 'parallel.vpp = 2 needs parallel.schedule = "interleaved"' \
  --set parallel.pp=2 --set parallel.vpp=2 --set 'parallel.schedule="zb-h1"'
expect_train_error "zb-v with an odd layer split" 'cuts model.n_layer (8) into 2 x pp = 6' \
  --set parallel.pp=3 --set parallel.vpp=2 --set 'parallel.schedule="zb-v"'
expect_train_error "zb-v without two chunks" 'needs parallel.vpp = 2' \
  --set parallel.pp=2 --set 'parallel.schedule="zb-v"'
expect_train_error "interleaved with ZeRO-3" 'use parallel.zero = 2 with it, parallel.vpp = 1, or schedule "zb-v"' \
  --set parallel.pp=2 --set parallel.vpp=2 --set 'parallel.schedule="interleaved"' --set parallel.dp=2 \
  --set parallel.zero=3 --set training.global_batch_size=16
expect_train_error "an unknown schedule" 'use "gpipe", "1f1b", "interleaved", "zb-h1" or "zb-v"' \
  --set parallel.pp=2 --set 'parallel.schedule="zb-h3"'

echo "$pass passed, $fails failed"
[ $fails -eq 0 ]

#!/usr/bin/env bash
# The planner against the trainer, exactly (issue 5; DESIGN principle 1): for
# layouts the trainer runs (dp = 1, 2, 4 x ZeRO 0, 1, 2; tp 2; pp 2; a tiny
# GPT-2, fp32, two micro-batches per step, small gradient buckets), the
# bytes of parameters, gradients and optimizer state per rank that
# `scaletrain plan --train-config ... --json` predicts equal the trainer's
# memory.json, and the DP payload bytes and collective calls per step (and
# the TP payload bytes) equal each step's comm_bytes / comm_calls in
# metrics.jsonl.
# Usage: test_plan_vs_trainer.sh PATH/TO/scaletrain REPO_ROOT
. "$(dirname "$0")/lib.sh"
st_cli_init "$@"

st_small_data 100000
# Both commands read the same config and overrides. n_embd = 30 makes the
# parameter count not a multiple of 4, so the flat buffers are padded at dp 4.
sets=(--set model.n_layer=2 --set model.n_head=2 --set model.n_embd=30 --set model.block_size=16
  --set training.micro_batch_size=2 --set training.threads=1 --set training.steps=2
  --set training.eval_interval=0 --set training.eval_steps=1 --set training.sample_tokens=0
  --set checkpoint.interval=0 --set parallel.bucket_mb=0.01
  --set "data.train=\"$work/data/train.bin\"" --set "data.val=\"$work/data/val.bin\"")
config=$root/configs/shakespeare_char.toml

# "dp tp pp zero [extra config]". With tp > 1 the TP payload bytes are
# compared too; with pp > 1 only the memory of stage 0 (rank 0 writes
# memory.json), as the planner does not count the trainer's pipeline
# messages yet. One case pads the vocabulary (model.vocab_multiple).
cases=("1 1 1 0" "2 1 1 0" "2 1 1 1" "2 1 1 2" "4 1 1 0" "4 1 1 1" "4 1 1 2"
  "2 1 1 1 --set model.vocab_multiple=64" "1 2 1 0" "2 2 1 1" "1 1 2 0")
i=0
for c in "${cases[@]}"; do
  read -r dp tp pp zero extra <<<"$c"
  extra=($extra)
  i=$((i + 1))
  {
    gbs=$((dp * 2 * 2))  # two micro-batches of 2 per rank: ZeRO-2 reduces twice
    layout=(--set training.global_batch_size=$gbs --set parallel.dp=$dp --set parallel.zero=$zero
      --set parallel.tp=$tp --set parallel.pp=$pp "${extra[@]}")
    run=$work/case$i
    np=$((dp * tp * pp))
    launcher=()
    [ $np -gt 1 ] && launcher=(timeout 300 mpirun -np $np)
    if ! "${launcher[@]}" "$bin" train --config "$config" --quiet "${sets[@]}" "${layout[@]}" --run-dir "$run" \
        >"$work/out" 2>&1; then
      echo "FAIL: dp=$dp zero=$zero did not train:"; cat "$work/out"; fails=$((fails + 1)); continue
    fi
    if ! "$bin" plan --train-config "$config" "${sets[@]}" "${layout[@]}" --cluster dgx-a100 --json \
        >"$work/plan.json" 2>"$work/err"; then
      echo "FAIL: dp=$dp zero=$zero plan: $(cat "$work/err")"; fails=$((fails + 1)); continue
    fi
    if out=$($py - "$run" "$work/plan.json" $dp $tp $pp <<'PY'
import json, sys
run, plan_path = sys.argv[1], sys.argv[2]
dp, tp, pp = (int(x) for x in sys.argv[3:6])
plan = json.load(open(plan_path))
mem = json.load(open(run + "/memory.json"))["per_rank"]
steps = [json.loads(l) for l in open(run + "/metrics.jsonl")]
bad = []
assert plan["layout"]["precision"] == "fp32" and (plan["layout"]["dp"], plan["layout"]["tp"], plan["layout"]["pp"]) == (dp, tp, pp)
stage0 = plan["bytes_per_stage"][0]  # rank 0 is on stage 0
for k in ("params", "grads", "optimizer"):
    if stage0[k] != mem[k + "_bytes"]:
        bad.append(f"{k}: planner {stage0[k]} bytes, trainer {mem[k + '_bytes']}")
if tp > 1:
    want_tp = plan["tp_step"]["payload_bytes"]
    for s in steps:
        if s.get("comm_bytes", {}).get("tp") != want_tp:
            bad.append(f"step {s['step']}: TP payload planner {want_tp} bytes, trainer {s.get('comm_bytes', {}).get('tp')}")
want_bytes = plan["dp_step"]["payload_bytes"]
want_calls = sum(c["calls"] for c in plan["dp_step"]["collectives"])
assert len(steps) == 2, len(steps)
for s in steps:
    got_bytes = s.get("comm_bytes", {}).get("dp", 0)
    got_calls = s.get("comm_calls", {}).get("dp", 0)
    if got_bytes != want_bytes:
        bad.append(f"step {s['step']}: DP payload planner {want_bytes} bytes, trainer {got_bytes}")
    if got_calls != want_calls:
        bad.append(f"step {s['step']}: DP calls planner {want_calls}, trainer {got_calls}")
if dp == 4 and stage0["padded_numel"] == stage0["numel"]:
    bad.append("no padding at dp 4: the test model no longer exercises it")
if dp > 1 and want_calls < 3:
    bad.append(f"only {want_calls} DP calls: the buckets are not exercised")
print("; ".join(bad) if bad else
      f"params/grads/optimizer {mem['params_bytes']}/{mem['grads_bytes']}/{mem['optimizer_bytes']} B, "
      f"DP {want_bytes} B in {want_calls} calls per step"
      + (f", TP {plan['tp_step']['payload_bytes']} B" if tp > 1 else "") + ": equal "
      f"({stage0['numel']} parameters, padded {stage0['padded_numel']})")
sys.exit(1 if bad else 0)
PY
    ); then
      pass=$((pass + 1)); echo "ok dp=$dp tp=$tp pp=$pp zero=$zero ${extra[*]}: $out"
    else
      echo "FAIL dp=$dp tp=$tp pp=$pp zero=$zero ${extra[*]}: $out"; fails=$((fails + 1))
    fi
  }
done

# Bad input to --train-config: one line naming the cause and the fix.
expect_error "pass --vocab N" plan --train-config "$config" --cluster dgx-a100 --set 'data.train="/nonexistent/train.bin"'
expect_error "vocab_size" plan --train-config "$config" --cluster dgx-a100 --set 'data.vocab="'"$work/small.txt"'"'
expect_error "give one" plan --train-config "$config" --model gpt2-124m --cluster dgx-a100
expect_error "use it with --train-config" plan --model gpt2-124m --cluster dgx-a100 --gpus 8 --set training.steps=1
expect_error "training.stepz" plan --train-config "$config" --cluster dgx-a100 --set training.stepz=1
expect_error "--bucket-mb must be positive" plan --train-config "$config" --cluster dgx-a100 --vocab 65 --bucket-mb 0

echo "$pass passed, $fails failed"
[ $fails -eq 0 ]

#!/usr/bin/env bash
# The planner against the trainer, exactly (issue 5; DESIGN principle 1): for
# layouts the trainer runs (dp = 1, 2, 4 x ZeRO 0, 1, 2; ZeRO-3 at dp 2 and
# 4, also with 4 layers and with recomputation; tp 2 and 4 with and
# without sequence parallelism; pp 2 and 4 under gpipe, 1f1b and
# interleaved; dp x tp x pp = 2 x 2 x 2 with ZeRO 0, 1, 2; the compressed
# gradient reductions bf16 and sign (parallel.dp_compress); activation
# recomputation (training.recompute selective and full over dp, tp, tp + sp,
# pp 1f1b, gpipe and interleaved, 2 x 2 x 2); zb-h1 and zb-v (pp 2 and 4,
# with tp + sp, ZeRO-1, -2 and -3 (zb-v's chunks gathering per pass),
# selective recomputation, Llama); Llama blocks (grouped-query
# attention with the key/value heads split over tp or replicated on each TP
# rank, tied and untied heads, over dp, tp, tp + sp, pp interleaved and
# 2 x 2 x 2); a tiny GPT-2, fp32, small
# gradient buckets), the bytes of parameters, gradients, optimizer state and
# activations per rank that `scaletrain plan --train-config ... --json`
# predicts for each stage equal the trainer's memory.json (the activations
# exactly too, where the brief of issue 22 asked for 5%: the cpu stack
# counts the trainer's buffer float for float), and the payload bytes and calls per step that it predicts for a rank of
# stage 0 on each of its DP, TP and PP groups equal each step's comm_bytes /
# comm_calls in metrics.jsonl (written by rank 0).
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
# tp 4 needs 4 heads (4 x 9 wide: still padded at dp 4); pp 4 and the
# interleaved schedule need more layers.
tp4=(--set model.n_head=4 --set model.n_embd=36)
sp=(--set parallel.sp=true)
l4=(--set model.n_layer=4)
l8=(--set model.n_layer=8)
gpipe=(--set 'parallel.schedule="gpipe"')
inter=(--set 'parallel.schedule="interleaved"' --set parallel.vpp=2)
sel=(--set 'training.recompute="selective"')
full=(--set 'training.recompute="full"')
zb=(--set 'parallel.schedule="zb-h1"')
zbv=(--set 'parallel.schedule="zb-v"' --set parallel.vpp=2)
# Llama blocks (4 heads of 8: RoPE needs an even head size; SwiGLU 88 wide),
# with key/value heads split over tp (n_kv_head 2 at tp 2) or replicated on
# every TP rank (n_kv_head 2 at tp 4, 1 at tp 2), tied and untied heads.
llama=(--set 'model.arch="llama"' --set model.n_head=4 --set model.n_embd=32)
kv2=(--set model.n_kv_head=2)
kv1=(--set model.n_kv_head=1)
untied=(--set model.tied_embeddings=false)
# Context parallelism: the ring's key/value traffic (or Ulysses' all-to-alls)
# on the CP group, the gradients over dp x cp, the activations of 1/cp of
# each sequence.
cp2=(--set parallel.cp=2)
cp4=(--set parallel.cp=4)
ul=(--set 'parallel.cp_impl="ulysses"')

# "dp tp pp zero micro-batches-per-step [extra config ...]". Two or four
# micro-batches of 2 sequences per DP rank: ZeRO-2 reduces after each, at
# any pp (with pp > 1 the buckets holding the tied embedding once, after its
# sum). One case pads the vocabulary (model.vocab_multiple).
cases=("1 1 1 0 2" "2 1 1 0 2" "2 1 1 1 2" "2 1 1 2 2" "4 1 1 0 2" "4 1 1 1 2" "4 1 1 2 2"
  "2 1 1 1 2 --set model.vocab_multiple=64"
  "1 2 1 0 2" "1 2 1 0 2 ${sp[*]}" "2 2 1 1 2" "2 2 1 2 2 ${sp[*]}"
  "1 4 1 0 2 ${tp4[*]}" "1 4 1 0 2 ${tp4[*]} ${sp[*]}"
  "1 1 2 0 2" "1 1 2 0 4 ${gpipe[*]}" "1 1 2 0 4 ${l4[*]} ${inter[*]}"
  "1 1 4 0 4 ${l4[*]}" "1 1 4 0 4 ${l4[*]} ${gpipe[*]}" "1 1 4 0 4 ${l8[*]} ${inter[*]}"
  "2 2 2 0 2" "2 2 2 1 2 ${sp[*]} ${l4[*]} ${inter[*]}" "2 2 2 2 4 ${sp[*]} ${gpipe[*]}"
  "2 1 2 2 4 ${l4[*]} ${inter[*]}" "2 1 4 2 4 ${l4[*]}"
  "2 1 1 0 2 --set parallel.dp_compress=\"sign\"" "4 1 1 0 2 --set parallel.dp_compress=\"bf16\""
  "2 2 2 0 2 --set parallel.dp_compress=\"sign\""
  "2 1 1 1 2 ${sel[*]}" "2 1 1 2 2 ${full[*]}" "1 2 1 0 2 ${sel[*]}" "1 2 1 0 2 ${full[*]}"
  "1 2 1 0 2 ${sp[*]} ${sel[*]}" "1 2 1 0 2 ${sp[*]} ${full[*]}" "1 1 2 0 4 ${l4[*]} ${sel[*]}"
  "1 1 2 0 4 ${gpipe[*]} ${full[*]}" "1 1 2 0 4 ${l4[*]} ${inter[*]} ${full[*]}"
  "1 1 2 0 4 ${l4[*]} ${inter[*]} ${sel[*]}" "2 2 2 1 2 ${sp[*]} ${l4[*]} ${inter[*]} ${full[*]}"
  "1 1 1 0 2 ${llama[*]} ${kv2[*]} ${untied[*]}" "2 2 1 1 2 ${llama[*]} ${kv2[*]} ${untied[*]}"
  "1 4 1 0 2 ${llama[*]} ${kv2[*]} ${sp[*]}" "1 4 1 0 2 ${llama[*]} ${kv2[*]} ${untied[*]} ${sel[*]}"
  "2 2 1 2 2 ${llama[*]} ${kv1[*]} ${sp[*]} ${full[*]}" "1 1 2 0 4 ${llama[*]} ${kv2[*]} ${untied[*]} ${l4[*]} ${inter[*]}"
  "2 2 2 1 2 ${llama[*]} ${kv1[*]} ${sp[*]} ${untied[*]}" "2 2 2 0 2 ${llama[*]} ${kv2[*]} ${full[*]}"
  "2 1 1 3 2" "4 1 1 3 2" "4 1 1 3 4 ${l4[*]}" "2 1 1 3 2 ${full[*]}" "4 1 1 3 2 ${sel[*]}"
  "2 2 1 3 2" "2 2 1 3 2 ${sp[*]} ${full[*]}" "2 1 2 3 4 ${l4[*]}" "2 1 2 3 4 ${gpipe[*]}"
  "2 2 2 3 2 ${sp[*]} ${full[*]}" "2 1 4 3 4 ${l4[*]} ${sel[*]}"
  "2 2 1 3 2 ${llama[*]} ${kv1[*]} ${sp[*]}" "2 1 2 3 4 ${llama[*]} ${kv2[*]} ${untied[*]} ${l4[*]}"
  "1 1 1 0 2 ${cp2[*]}" "1 1 1 0 2 ${cp4[*]}" "2 1 1 1 2 ${cp2[*]}" "2 1 1 3 2 ${cp2[*]} ${sel[*]}"
  "1 2 1 0 2 ${cp2[*]} ${sp[*]}" "1 1 2 0 4 ${cp2[*]} ${full[*]}" "1 2 2 0 2 ${cp2[*]} ${llama[*]} ${kv1[*]}"
  "1 1 1 0 2 ${cp2[*]} ${llama[*]} ${kv2[*]} ${sel[*]}"
  "1 1 1 0 2 ${cp2[*]} ${ul[*]}" "2 1 1 3 2 ${cp2[*]} ${ul[*]} ${sel[*]}" "1 2 1 0 2 ${tp4[*]} ${cp2[*]} ${ul[*]} ${sp[*]} ${full[*]}"
  "1 1 2 0 4 ${cp2[*]} ${ul[*]} ${llama[*]} ${kv2[*]}"
  "1 1 2 0 4 ${zb[*]}" "2 2 2 1 2 ${sp[*]} ${zb[*]}" "2 1 4 3 4 ${l4[*]} ${zb[*]} ${sel[*]}"
  "1 1 2 0 4 ${llama[*]} ${kv1[*]} ${untied[*]} ${l4[*]} ${zb[*]}"
  "1 1 2 0 4 ${l4[*]} ${zbv[*]}" "2 2 2 1 2 ${sp[*]} ${l4[*]} ${zbv[*]}" "2 1 4 2 4 ${l8[*]} ${zbv[*]} ${sel[*]}"
  "1 1 2 0 4 ${llama[*]} ${kv2[*]} ${untied[*]} ${l4[*]} ${zbv[*]}" "2 1 4 3 4 ${l8[*]} ${zbv[*]}"
  "2 2 2 3 2 ${sp[*]} ${l4[*]} ${zbv[*]} ${sel[*]}")
i=0
for c in "${cases[@]}"; do
  read -r dp tp pp zero mbs extra <<<"$c"
  extra=($extra)
  i=$((i + 1))
  what="dp=$dp tp=$tp pp=$pp zero=$zero m=$mbs ${extra[*]}"
  {
    gbs=$((dp * 2 * mbs))
    layout=(--set training.global_batch_size=$gbs --set parallel.dp=$dp --set parallel.zero=$zero
      --set parallel.tp=$tp --set parallel.pp=$pp "${extra[@]}")
    run=$work/case$i
    cp=$(sed -n 's/.*parallel\.cp=\([0-9]*\).*/\1/p' <<<"${extra[*]}")
    np=$((dp * tp * pp * ${cp:-1}))
    launcher=()
    [ $np -gt 1 ] && launcher=(timeout 120 mpirun -np $np)
    if ! "${launcher[@]}" "$bin" train --config "$config" --quiet "${sets[@]}" "${layout[@]}" --run-dir "$run" \
        >"$work/out" 2>&1; then
      echo "FAIL: $what did not train:"; cat "$work/out"; fails=$((fails + 1)); continue
    fi
    if ! "$bin" plan --train-config "$config" "${sets[@]}" "${layout[@]}" --cluster dgx-a100 --json \
        >"$work/plan.json" 2>"$work/err"; then
      echo "FAIL: $what plan: $(cat "$work/err")"; fails=$((fails + 1)); continue
    fi
    if out=$($py - "$run" "$work/plan.json" $dp $tp $pp "${extra[*]} zero$zero" <<'PY'
import json, sys
run, plan_path = sys.argv[1], sys.argv[2]
dp, tp, pp = (int(x) for x in sys.argv[3:6])
cp = int(sys.argv[6].split("parallel.cp=")[1].split()[0]) if "parallel.cp=" in sys.argv[6] else 1
sp = "parallel.sp=true" in sys.argv[6]
recompute = ("selective" if 'recompute="selective"' in sys.argv[6] else
             "full" if 'recompute="full"' in sys.argv[6] else "none")
plan = json.load(open(plan_path))
memory = json.load(open(run + "/memory.json"))
mem = memory["per_rank"]
steps = [json.loads(l) for l in open(run + "/metrics.jsonl")]
bad = []
assert len(memory["per_stage"]) == pp and memory["per_stage"][0] == mem, memory
assert plan["layout"]["precision"] == "fp32" and (plan["layout"]["dp"], plan["layout"]["tp"], plan["layout"]["pp"], plan["layout"]["cp"]) == (dp, tp, pp, cp)
assert plan["layout"]["sp"] == sp, plan["layout"]
assert plan["layout"]["recompute"] == recompute, plan["layout"]
assert len(plan["bytes_per_stage"]) == pp and len(plan["step_per_stage"]) == pp
stage0 = plan["bytes_per_stage"][0]  # rank 0 is on stage 0
# Every stage: memory.json's per_stage holds one rank of each (dp 0, tp 0).
for st, (planned, trained) in enumerate(zip(plan["bytes_per_stage"], memory["per_stage"])):
    for k in ("params", "grads", "optimizer", "activations"):
        if planned[k] != trained[k + "_bytes"]:
            bad.append(f"stage {st} {k}: planner {planned[k]} bytes, trainer {trained[k + '_bytes']}")
want = plan["step_per_stage"][0]  # what a rank of stage 0 issues per step
assert len(steps) == 2, len(steps)
for s in steps:
    # Stage 0 is the lead's comm_bytes/comm_calls; with pp > 1 the lines also
    # hold every stage's (comm_*_by_stage).
    for st in range(pp):
        for g in ("dp", "tp", "pp", "cp"):
            if st == 0:
                got_bytes = s.get("comm_bytes", {}).get(g, 0)
                got_calls = s.get("comm_calls", {}).get(g, 0)
            else:
                got_bytes = s["comm_bytes_by_stage"][g][st]
                got_calls = s["comm_calls_by_stage"][g][st]
            w = plan["step_per_stage"][st][g]
            if pp > 1 and (s["comm_bytes_by_stage"][g][st], s["comm_calls_by_stage"][g][st]) != (got_bytes, got_calls):
                bad.append(f"step {s['step']}: stage 0's comm_*_by_stage differs from comm_bytes/comm_calls")
            if got_bytes != w["payload_bytes"] or got_calls != w["calls"]:
                bad.append(f"step {s['step']} stage {st}: {g.upper()} planner {w['payload_bytes']} B in {w['calls']} "
                           f"calls, trainer {got_bytes} B in {got_calls}")
if pp == 1 and plan["dp_step"]["payload_bytes"] != want["dp"]["payload_bytes"]:
    bad.append("dp_step differs from step_per_stage[0].dp at pp 1")
if pp == 1 and tp > 1 and plan["tp_step"]["payload_bytes"] != want["tp"]["payload_bytes"]:
    bad.append("tp_step differs from step_per_stage[0].tp at pp 1")
# The cases must exercise what they are about.
if dp == 4 and stage0["padded_numel"] == stage0["numel"]:
    bad.append("no padding at dp 4: the test model no longer exercises it")
if sys.argv[6].endswith("zero3") and not any("forward" in c["what"] for c in want["dp"]["collectives"]):
    bad.append("ZeRO-3's forward parameter all-gathers missing")
if dp > 1 and want["dp"]["calls"] < 3:
    bad.append(f"only {want['dp']['calls']} DP calls: the buckets are not exercised")
if tp > 1 and sp != any("norm/bias" in c["what"] for c in want["tp"]["collectives"]):
    bad.append("SP's norm/bias gradient all-reduce missing (or present without SP)")
untied = "tied_embeddings=false" in sys.argv[6]
untied = untied or 'schedule="zb-v"' in sys.argv[6]  # the first stage runs the head: one copy
if pp > 1 and untied == any(c["op"] == "send" and "tied" in c["what"] for c in want["pp"]["collectives"]):
    bad.append("stage 0 does not exchange the tied embedding (or exchanges an untied one)")
replicated_kv = "model.n_kv_head=1" in sys.argv[6] or ("model.n_kv_head=2" in sys.argv[6] and tp == 4)
ulysses = 'cp_impl="ulysses"' in sys.argv[6]
if cp > 1 and plan["layout"]["cp_impl"] != ("ulysses" if ulysses else "ring"):
    bad.append(f"the plan's cp_impl is {plan['layout']['cp_impl']}")
if cp > 1 and not any(("all-to-all" if ulysses else "key/value block") in c["what"] for c in want["cp"]["collectives"]):
    bad.append("the context-parallel transfers missing")
if tp > 1 and replicated_kv != any("key/value" in c["what"] for c in want["tp"]["collectives"]):
    bad.append("the replicated key/value gradient all-reduce missing (or present with split heads)")
print("; ".join(bad) if bad else
      f"params/grads/optimizer/activations {mem['params_bytes']}/{mem['grads_bytes']}/{mem['optimizer_bytes']}/"
      f"{mem['activations_bytes']} B; per step "
      + ", ".join(f"{g.upper()} {want[g]['payload_bytes']} B in {want[g]['calls']}"
                  for g in ("dp", "tp", "pp", "cp") if want[g]["calls"])
      + f": equal ({stage0['numel']} parameters, padded {stage0['padded_numel']})"
      + ("" if pp == 1 else "; stages 1-%d: " % (pp - 1) + ", ".join(
          "%d/%d/%d/%d B, PP %d B in %d" % (b["params"], b["grads"], b["optimizer"], b["activations"],
                                           w["pp"]["payload_bytes"],
                                        w["pp"]["calls"])
          for b, w in zip(plan["bytes_per_stage"][1:], plan["step_per_stage"][1:])) + ": equal"))
sys.exit(1 if bad else 0)
PY
    ); then
      pass=$((pass + 1)); echo "ok $what: $out"
    else
      echo "FAIL $what: $out"; fails=$((fails + 1))
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

#!/usr/bin/env bash
# Command-line tests of `scaletrain plan`. Usage: test_plan_cli.sh SCALETRAIN REPO_ROOT
. "$(dirname "$0")/lib.sh"
st_cli_init "$@"
set -o pipefail
cd "$root" || exit 1

# A plain prediction in JSON carries every documented field.
if "$bin" plan --model llama3-70b --cluster dgx-h100 --gpus 512 --tp 8 --pp 4 --recompute selective --sp \
    --zero 1 --tokens 15e12 --json >"$tmp/plan.json" 2>"$tmp/err"; then
  python3 - "$tmp/plan.json" <<'PY' || fail "plan --json fields"
import json, sys
j = json.load(open(sys.argv[1]))
for k in ["layout", "step_time_s", "time_breakdown_s", "tokens_per_s", "tflops_per_gpu", "mfu",
          "memory_per_gpu_gib", "memory_breakdown_gib", "fits", "time_to_train_days", "gpu_hours",
          "energy_mwh", "peak_power_mw", "cost_usd", "comm_bytes_per_gpu", "comm_to_compute"]:
    assert k in j, k
assert set(j["layout"]) >= {"tp", "pp", "dp", "vpp", "micro_batch", "global_batch", "zero", "recompute", "sp"}
assert set(j["time_breakdown_s"]) == {"compute", "recompute", "tp_comm", "cp_comm", "pp_comm", "dp_comm", "bubble", "optimizer"}
assert set(j["memory_breakdown_gib"]) == {"params", "grads", "optimizer", "activations", "other"}
assert abs(sum(j["time_breakdown_s"].values()) - j["step_time_s"]) < 1e-9 * j["step_time_s"]
assert j["layout"]["dp"] == 16 and j["tokens"] == 15e12
assert j["layout"]["grad_reduce"] == "fp32"  # bf16's default
assert 0 < j["mfu"] < 1
PY
else
  fail "plan --json exited non-zero: $(cat "$tmp/err")"
fi

# --grad-reduce compute: the gradient reduction and its buffer in bf16, the
# DP bytes smaller, the layout says so.
if "$bin" plan --model llama3-70b --cluster dgx-h100 --gpus 512 --tp 8 --pp 4 --recompute selective --sp \
    --zero 1 --grad-reduce compute --json >"$tmp/plan16.json" 2>"$tmp/err"; then
  python3 - "$tmp/plan.json" "$tmp/plan16.json" <<'PY' || fail "plan --grad-reduce compute"
import json, sys
a, b = (json.load(open(f)) for f in sys.argv[1:3])
assert b["layout"]["grad_reduce"] == "bf16", b["layout"]
assert b["comm_bytes_per_gpu"]["dp"] < a["comm_bytes_per_gpu"]["dp"]
assert b["memory_breakdown_gib"]["grads"] < a["memory_breakdown_gib"]["grads"]
PY
else
  fail "plan --grad-reduce compute exited non-zero: $(cat "$tmp/err")"
fi

# Search and sweep (with a plot).
"$bin" plan --model gpt3-6.7b --cluster dgx-a100 --gpus 64 --search --top 3 >"$tmp/search.txt" 2>&1 \
  || fail "search exited non-zero"
grep -q "^searched [0-9]* layouts" "$tmp/search.txt" || fail "search prints the layout count"
grep -q "by (tp, pp) family" "$tmp/search.txt" || fail "search explains families"
# Every search row and sweep point carries the step's range from the uncertain inputs.
"$bin" plan --model gpt3-6.7b --cluster dgx-a100 --gpus 64 --search --top 3 --json >"$tmp/search.json" 2>&1 \
  || fail "search --json exited non-zero"
"$bin" plan --model gpt3-6.7b --cluster dgx-a100 --sweep 32,64 --json >"$tmp/sweep.json" 2>&1 \
  || fail "sweep --json exited non-zero"
"$bin" plan --model gpt3-6.7b --cluster dgx-a100 --gpus 64 --tp 8 --json >"$tmp/single.json" 2>&1 \
  || fail "plan --json exited non-zero"
python3 - "$tmp/search.json" "$tmp/sweep.json" "$tmp/single.json" <<'PY' || fail "every plan carries predicted_range"
import json, sys
search, sweep, single = (json.load(open(f)) for f in sys.argv[1:4])
plans = search["top"] + [p["plan"] for p in sweep["points"] if p["found"]] + [single]
assert len(plans) == 6, len(plans)
for p in plans:
    lo, hi = p["predicted_range"]
    assert [lo, hi] == p["step_time_range_s"]
    assert 0 < lo < p["step_time_s"] < hi, (lo, p["step_time_s"], hi)
    tlo, thi = p["tokens_per_s_range"]
    assert tlo < p["tokens_per_s"] < thi, (tlo, p["tokens_per_s"], thi)
    assert abs(tlo * hi - p["tokens_per_s"] * p["step_time_s"]) < 1e-6 * tlo * hi
PY
"$bin" plan --model gpt3-6.7b --cluster dgx-a100 --sweep 32,64 >"$tmp/sweep.txt" 2>&1 || fail "sweep exited non-zero"
grep -q "tokens/s range" "$tmp/sweep.txt" || fail "sweep text prints each point's range"
# A wider span widens the range (--kernel-uncertainty replaces the kernels' sourced spans).
python3 - "$bin" <<'PY' || fail "--kernel-uncertainty widens the range"
import json, subprocess, sys
def rng(*extra):
    out = subprocess.run([sys.argv[1], "plan", "--model", "gpt3-6.7b", "--cluster", "dgx-a100", "--gpus", "64",
                          "--tp", "8", "--json", *extra], capture_output=True, text=True, check=True).stdout
    return json.loads(out)["predicted_range"]
a, b = rng(), rng("--kernel-uncertainty", "0.3")
assert b[0] < a[0] and b[1] > a[1], (a, b)
PY
# The GPUs of issue 36 plan on their presets; Volta has no bf16 and says so.
for c in dgx1-v100 dgx2 frontier h800-ib hgx-a800 gh200-nvl32 hgx-h20 mi325x-ib pcie-a100-100gbe pcie-h100nvl-100gbe; do
  "$bin" plan --model gpt3-1.3b --cluster "$c" --gpus 16 --precision fp16 >/dev/null 2>"$tmp/err" \
    || fail "plan on $c: $(cat "$tmp/err")"
done
expect_error "v100-16g has no bf16 matrix rate in the catalog; use --precision fp16" \
  plan --model gpt3-1.3b --cluster dgx1-v100 --gpus 8
# The slowest GPU sets the pace: measured for the H100 (lower with more GPUs), not for the A100.
python3 - "$bin" <<'PY' || fail "slowest_gpu_pace follows the GPU count where the spread is measured"
import json, subprocess, sys
def pace(cluster, gpus):
    out = subprocess.run([sys.argv[1], "plan", "--model", "gpt3-6.7b",
                          "--cluster", cluster, "--gpus", str(gpus), "--tp", "8", "--json"],
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out)["slowest_gpu_pace"]
a, b = pace("dgx-h100", 8), pace("dgx-h100", 1024)
assert 0.95 < b < a < 1, (a, b)
assert pace("dgx-a100", 1024) == 1
PY
"$bin" plan --model gpt3-6.7b --cluster dgx-h100 --gpus 1024 --tp 8 | grep -q "compute at the pace of the slowest of 1024 GPUs" \
  || fail "the text report names the slowest GPU's pace"
# Gradient buckets: each stack's own unless --bucket-mb says (Megatron-Core's
# max(40 M, 1 M x dp) parameters of fp32 gradients on modern; 25 MiB on
# pytorch), and at large dp every bucket is an NCCL ring call whose latency
# grows with dp, so smaller buckets cost more exposed DP time.
python3 - "$bin" <<'PY' || fail "gradient buckets per stack and --bucket-mb"
import json, subprocess, sys
def plan(*extra):
    out = subprocess.run([sys.argv[1], "plan", "--model", "gpt3-6.7b", "--cluster", "dgx-h100",
                          "--gpus", "1024", "--tp", "8", "--zero", "1", "--micro-batch", "1",
                          "--global-batch", "1024", "--json", *extra],
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out)
mcore, small = plan(), plan("--bucket-mb", "25")
assert mcore["layout"]["bucket_bytes"] == 128 * 10**6 * 4, mcore["layout"]
assert small["layout"]["bucket_bytes"] == 25 << 20, small["layout"]
assert small["dp_step"]["buckets"] > 10 * mcore["dp_step"]["buckets"], (small["dp_step"], mcore["dp_step"])
assert small["time_breakdown_s"]["dp_comm"] > mcore["time_breakdown_s"]["dp_comm"]
assert plan("--stack", "pytorch")["layout"]["bucket_bytes"] == 25 << 20
PY
"$bin" plan --model gpt3-6.7b --cluster dgx-h100 --gpus 64 --tp 8 --zero 1 | grep -q "gradient buckets" \
  || fail "the text report gives the DP bucket count"
expect_error "--bucket-mb must be positive" plan --model gpt3-6.7b --cluster dgx-h100 --gpus 64 --bucket-mb 0

# --cp: each sequence over cp GPUs (tp x cp x pp x dp GPUs), the ring's
# transfers a term of the step; a stack without it, a sequence its chunks do
# not divide, and a training config (the trainer has none) are errors.
if "$bin" plan --model llama3-8b --cluster dgx-h100 --gpus 16 --tp 2 --cp 4 --seq 32768 --global-batch 16 \
    --json >"$tmp/cp.json" 2>"$tmp/err"; then
  python3 - "$tmp/cp.json" <<'PY' || fail "plan --cp"
import json, sys
j = json.load(open(sys.argv[1]))
assert (j["layout"]["tp"], j["layout"]["cp"], j["layout"]["dp"]) == (2, 4, 2), j["layout"]
assert j["time_breakdown_s"]["cp_comm"] > 0
assert abs(sum(j["time_breakdown_s"].values()) - j["step_time_s"]) < 1e-9 * j["step_time_s"]
PY
else
  fail "plan --cp exited non-zero: $(cat "$tmp/err")"
fi
"$bin" plan --model llama3-8b --cluster dgx-h100 --gpus 16 --tp 2 --cp 4 --seq 32768 --global-batch 16 --search \
  | grep -q "tp=2 pp=1 dp=2 cp=4" || fail "plan --cp --search holds cp"
expect_error "the legacy stack has no context parallelism" plan --model llama3-8b --cluster dgx-h100 --gpus 16 \
  --cp 2 --stack legacy
expect_error "cp=3 cuts each sequence into 2 x cp = 6 chunks" plan --model llama3-8b --cluster dgx-h100 --gpus 48 --cp 3
# Ulysses (--cp-impl): its all-to-alls in the step, its heads check.
"$bin" plan --model llama3-8b --cluster dgx-h100 --gpus 16 --tp 2 --cp 4 --seq 32768 --global-batch 16 \
  --cp-impl ulysses | grep -q "cp=4 (ulysses)" || fail "plan --cp-impl ulysses"
expect_error "cp=4 with --cp-impl ulysses splits each GPU's 8 query heads and 2 key/value heads (tp=4)" \
  plan --model llama3-8b --cluster dgx-h100 --gpus 16 --tp 4 --cp 4 --seq 32768 --cp-impl ulysses
expect_error "--cp-impl 'star' is unknown; use ring or ulysses" plan --model llama3-8b --cluster dgx-h100 \
  --gpus 16 --cp 2 --cp-impl star
# --search-cp tries cp too: at 32k positions on 16 GPUs the best holds cp > 1,
# and no layout has a cp whose 2 cp chunks do not divide the sequence.
"$bin" plan --model llama3-8b --cluster dgx-h100 --gpus 16 --seq 32768 --global-batch 16 --search --search-cp \
  --json >"$tmp/cp.json" || fail "plan --search --search-cp"
python3 - "$tmp/cp.json" <<'PY' || fail "plan --search --search-cp: the best layout"
import json, sys
r = json.load(open(sys.argv[1]))
cps = {f["cp"] for f in r["families"]}
assert r["best"]["layout"]["cp"] > 1, r["best"]["layout"]
assert cps >= {1, 2, 4, 8} and all(32768 % (2 * c) == 0 for c in cps), cps
PY
# A training config's parallel.cp (or --cp over it): the trainer's ring.
"$bin" plan --train-config configs/shakespeare_char.toml --cluster dgx-h100 --vocab 65 --set parallel.cp=2 \
  | grep -q "cp=2" || fail "plan --train-config with parallel.cp = 2 plans cp=2"
# Layers that pp x vpp does not cut into equal chunks: an error naming the
# split (the trainer and Megatron refuse it too); pp alone may leave stages a
# layer apart (the trainer's split by cost, the last stage also running the
# head), and the text says so.
expect_error "interleaving cuts the 126 layers of llama3-405b into pp x vpp = 16 x 4 = 64 equal chunks" \
  plan --model llama3-405b --cluster dgx-h100 --gpus 1024 --tp 8 --pp 16 --vpp 4 --global-batch 512
"$bin" plan --model llama3-8b --cluster dgx-h100 --gpus 24 --tp 8 --pp 3 --global-batch 48 |
  grep -q "32 layers over pp=3, split by cost as the trainer splits them .*: stages 0-1: 11 layers, stage 2: 10 layers" ||
  fail "plan names an uneven pipeline split"
# --shard-group: hybrid sharding (FSDP's HYBRID_SHARD), ZeRO over groups of
# a node's 8 GPUs and the gradient shards all-reduced across the 4 groups:
# less DP traffic on a slow fabric than sharding over all 32, more memory.
common=(--model llama2-7b --cluster jean-zay-a100 --gpus 32 --seq 4096 --micro-batch 2 --global-batch 64 --zero 3
  --stack pytorch)
if "$bin" plan "${common[@]}" --shard-group 8 --json >"$tmp/hsdp.json" 2>"$tmp/err" &&
    "$bin" plan "${common[@]}" --json >"$tmp/fsdp.json" 2>>"$tmp/err"; then
  python3 - "$tmp/hsdp.json" "$tmp/fsdp.json" <<'PY' || fail "plan --shard-group"
import json, sys
h, f = (json.load(open(p)) for p in sys.argv[1:3])
assert h["layout"]["shard_group"] == 8 and f["layout"]["shard_group"] == 32, (h["layout"], f["layout"])
r = h["dp_step"]["replicas"]
assert r["groups"] == 4 and all(c["op"] == "allreduce" for c in r["collectives"]), r
assert "replicas" not in f["dp_step"]
assert h["memory_breakdown_gib"]["optimizer"] > 3.9 * f["memory_breakdown_gib"]["optimizer"]
assert h["comm_bytes_per_gpu"]["dp"] < f["comm_bytes_per_gpu"]["dp"]
PY
else
  fail "plan --shard-group exited non-zero: $(cat "$tmp/err")"
fi
"$bin" plan "${common[@]}" --shard-group 8 >"$tmp/hsdp.txt" 2>&1
grep -q "shard=8" "$tmp/hsdp.txt" && grep -q "all-reducing the gradient shards across 4 replicas" "$tmp/hsdp.txt" ||
  fail "plan --shard-group text: $(cat "$tmp/hsdp.txt")"
"$bin" plan "${common[@]}" --shard-group 8 --search | grep -q "shard=8" || fail "plan --shard-group --search holds it"
expect_error "--shard-group 6 must divide the 32 data-parallel ranks; nearest: 4 or 8" plan "${common[@]}" --shard-group 6
expect_error "ZeRO-0 shards nothing" plan --model llama2-7b --cluster dgx-a100 --gpus 32 --zero 0 --shard-group 8
expect_error "trainer has no hybrid sharding" plan --train-config configs/shakespeare_char.toml --cluster dgx-h100 \
  --shard-group 2
# --recompute-layers K: full recomputation of the first K layers of each
# model chunk (Megatron's block method), between none and full in memory and
# time; a count beyond a chunk, another policy and the trainer are errors.
rcl=(--model llama3-8b --cluster dgx-h100 --gpus 8 --tp 2 --pp 2 --vpp 2 --global-batch 32 --zero 1)
if "$bin" plan "${rcl[@]}" --recompute full --recompute-layers 2 --json >"$tmp/rc2.json" 2>"$tmp/err" &&
    "$bin" plan "${rcl[@]}" --recompute full --json >"$tmp/rcall.json" 2>>"$tmp/err" &&
    "$bin" plan "${rcl[@]}" --recompute none --json >"$tmp/rc0.json" 2>>"$tmp/err"; then
  python3 - "$tmp/rc2.json" "$tmp/rcall.json" "$tmp/rc0.json" <<'PY' || fail "plan --recompute-layers"
import json, sys
k, a, n = (json.load(open(p)) for p in sys.argv[1:4])
assert k["layout"]["recompute"] == "full" and a["layout"]["recompute"] == "full"
act = lambda j: j["memory_breakdown_gib"]["activations"]
assert act(a) < act(k) < act(n), (act(a), act(k), act(n))
rc = lambda j: j["time_breakdown_s"]["recompute"]
assert abs(rc(k) - rc(a) / 4) < 1e-9 * rc(a), (rc(k), rc(a))
assert k["layout"]["recompute_layers"] == 2 and a["layout"]["recompute_layers"] == 0
PY
else
  fail "plan --recompute-layers exited non-zero: $(cat "$tmp/err")"
fi
expect_error "--recompute-layers 9 exceeds the 8 layers of a model chunk" plan "${rcl[@]}" --recompute full --recompute-layers 9
expect_error "picks the layers full recomputation reruns; use --recompute full" plan "${rcl[@]}" --recompute selective \
  --recompute-layers 2
expect_error "the trainer has no partial recomputation" plan --train-config configs/shakespeare_char.toml --vocab 65 \
  --cluster dgx-h100 --recompute full --recompute-layers 1
# A row that states every knob predicts what `plan` predicts for them (issue
# 20 (g): such a row once found "no valid layout" where plan ran it).
hdr="id,source,model,params_b,layers,hidden,heads,seq,vocab,gpu,num_gpus,tp,pp,dp,vpp,sp,recompute,micro_batch,global_batch,measured_tflops_per_gpu,measured_mfu,measured_step_s,measured_tokens_per_s,stack,zero,notes"
agree() {  # agree STACK MODEL CLUSTER GPU TP PP DP VPP MB GB ZERO RC
  local st=$1 m=$2 cl=$3 gpu=$4 tp=$5 pp=$6 dp=$7 vpp=$8 mb=$9 gb=${10} zero=${11} rc=${12}
  printf '%s\nrow,x,%s,,,,,,,%s,%s,%s,%s,%s,%s,false,%s,%s,%s,,0.5,,,%s,%s,\n' "$hdr" "$m" "$gpu" \
    $((tp * pp * dp)) "$tp" "$pp" "$dp" "$vpp" "$rc" "$mb" "$gb" "$st" "$zero" >"$tmp/agree.csv"
  "$bin" plan --model "$m" --cluster "$cl" --gpus $((tp * pp * dp)) --tp "$tp" --pp "$pp" --dp "$dp" --vpp "$vpp" \
    --micro-batch "$mb" --global-batch "$gb" --zero "$zero" --recompute "$rc" --stack "$st" --json >"$tmp/agree-plan.json" &&
    "$bin" plan validate "$tmp/agree.csv" --json >"$tmp/agree-val.json" &&
    python3 - "$tmp/agree-plan.json" "$tmp/agree-val.json" <<'PY' || fail "plan and plan validate differ: $*"
import json, sys
p, v = (json.load(open(f)) for f in sys.argv[1:3])
r = v["rows"][0]
assert "error" not in r, r
assert abs(r["step_time_s"] - p["step_time_s"]) <= 1e-9 * p["step_time_s"], (r["step_time_s"], p["step_time_s"])
PY
}
agree modern gpt3-175b dgx-a100 a100-80g 8 8 1 1 1 1024 1 none
agree pytorch llama3-8b dgx-h100 h100-sxm 1 2 4 1 2 64 3 full
agree legacy gpt3-6.7b dgx-a100 a100-80g 2 4 2 2 1 64 0 selective
agree megatron-deepspeed llama2-70b dgx-h100 h100-sxm 8 4 2 1 1 128 1 full
"$bin" plan --model gpt2-1.5b --cluster pcie-h100-100gbe --sweep 8,16,32,64,128 --global-batch 128 \
  --plot "$tmp/sweep.svg" >"$tmp/sweep.txt" 2>&1 || fail "sweep exited non-zero"
grep -q "where more GPUs stop helping" "$tmp/sweep.txt" || fail "sweep explains poor scaling"
grep -q "<svg" "$tmp/sweep.svg" || fail "sweep writes an SVG"
python3 -c "import xml.dom.minidom,sys; xml.dom.minidom.parse(sys.argv[1])" "$tmp/sweep.svg" || fail "SVG is well-formed"

# A stack of one's own (docs/planner.md's worked example): Megatron-Core
# without TP overlap, a file built on `modern`. `plan` and `plan validate`
# take it by name or alias; with SP the TP time it no longer hides grows.
printf 'description = "our fork: Megatron-Core without TP overlap"\naliases = ["our-megatron"]\nbase = "modern"\ntp_comm_overlap = false\n' \
  >"$tmp/my-megatron.toml"
fork=(--model llama3-70b --cluster dgx-h100 --gpus 64 --tp 8 --pp 4 --sp --recompute full --zero 1 --json)
if "$bin" plan "${fork[@]}" --stack-file "$tmp/my-megatron.toml" --stack our-megatron >"$tmp/fork.json" 2>"$tmp/err" &&
    "$bin" plan "${fork[@]}" >"$tmp/modern.json" 2>>"$tmp/err"; then
  python3 - "$tmp/fork.json" "$tmp/modern.json" <<'PY' || fail "plan --stack-file"
import json, sys
f, m = (json.load(open(p)) for p in sys.argv[1:3])
assert f["software"] == "my-megatron", f["software"]
assert f["time_breakdown_s"]["tp_comm"] > 1.5 * m["time_breakdown_s"]["tp_comm"], (f["time_breakdown_s"], m["time_breakdown_s"])
assert f["step_time_s"] > m["step_time_s"]
PY
else
  fail "plan --stack-file exited non-zero: $(cat "$tmp/err")"
fi
printf '%s\nrow,x,llama3-70b,,,,,,,h100-sxm,64,8,4,2,,true,full,1,64,,0.4,,,Our Megatron,1,\n' "$hdr" >"$tmp/fork.csv"
"$bin" plan validate "$tmp/fork.csv" --stack-file "$tmp/my-megatron.toml" --json >"$tmp/fork-val.json" 2>"$tmp/err" &&
  python3 -c "import json,sys; r=json.load(open(sys.argv[1]))['rows'][0]; assert r['stack']=='my-megatron', r" \
    "$tmp/fork-val.json" || fail "plan validate --stack-file: $(cat "$tmp/err")"
printf 'base = "modern"\ntp_overlap = false\n' >"$tmp/typo.toml"
expect_error "typo.toml:2: unknown key 'tp_overlap'; valid keys: description, aliases, base" \
  plan --model llama3-8b --cluster dgx-h100 --gpus 8 --stack-file "$tmp/typo.toml"
expect_error "unknown software stack 'modren'; did you mean 'modern'?" plan --model llama3-8b --cluster dgx-h100 \
  --gpus 8 --stack modren

# Validation prints every row and the MAPE, in JSON as rows and mape.
"$bin" plan validate tests/plan/published-runs.csv --json >"$tmp/val.json" 2>&1 || fail "validate exited non-zero"
python3 - "$tmp/val.json" <<'PY' || fail "validate --json has rows, mape, coverage and half-width"
import json, sys
j = json.load(open(sys.argv[1]))
assert len(j["rows"]) == 26 and j["mape"] > 0
inside = [r["predicted_range"][0] <= r["measured"] <= r["predicted_range"][1] for r in j["rows"]]
assert [r["in_range"] for r in j["rows"]] == inside
assert abs(j["coverage"] - sum(inside) / len(inside)) < 1e-12, j["coverage"]
assert 0 < j["mean_half_width_pct"] < 50, j["mean_half_width_pct"]
PY
"$bin" plan validate tests/plan/korthikanti-2022.csv >"$tmp/val.txt" 2>&1 || fail "validate exited non-zero"
grep -q "MAPE .* range: coverage [0-9]*% ([0-9]* of 8 measured figures in their range), mean half-width" \
  "$tmp/val.txt" || fail "validate prints coverage and half-width beside the MAPE"

# Bad input: non-zero exit and one line naming the fix (expect_error in lib.sh).
expect_error "did you mean 'dgx-h100'" plan --model llama3-8b --cluster dgx-h10 --gpus 8
expect_error "did you mean 'llama3-8b'" plan --model llama3-9b --cluster dgx-h100 --gpus 8
expect_error "nearest valid tp: 4 or 8" plan --model llama3-8b --cluster dgx-h100 --gpus 12 --tp 6 --pp 1 --dp 2
expect_error "use dp=4" plan --model llama3-8b --cluster dgx-h100 --gpus 16 --tp 2 --pp 2 --dp 3
expect_error "stack has no interleaved pipeline schedule (DeepSpeed's pipeline engine runs 1F1B); use --vpp 1" \
  plan --model gpt3-13b --cluster dgx-a100 --gpus 32 --tp 4 --pp 4 --vpp 2 --stack deepspeed
expect_error "tp must be >= 1, got 0" plan --model llama3-8b --cluster dgx-h100 --gpus 8 --tp 0
expect_error "pp must be >= 1, got 0" plan --model llama3-8b --cluster dgx-h100 --gpus 8 --pp 0
expect_error "nearest valid global batch: 96 or 112" plan --model llama3-8b --cluster dgx-h100 --gpus 8 \
  --micro-batch 2 --global-batch 100
expect_error "cannot open" plan validate "$tmp/missing.csv"
expect_error "--stack: unknown software stack 'fancy'" plan validate "$root/tests/plan/korthikanti-2022.csv" --stack fancy
expect_error "--kernel-uncertainty = 1.5 is not a fraction" plan --model llama3-8b --cluster dgx-h100 --gpus 8 \
  --kernel-uncertainty 1.5
expect_error "use fp32, compute" plan --model llama3-8b --cluster dgx-h100 --gpus 8 --grad-reduce bf32

if [ "$fails" -ne 0 ]; then
  echo "$fails check(s) failed"
  exit 1
fi
echo "all plan CLI checks passed"

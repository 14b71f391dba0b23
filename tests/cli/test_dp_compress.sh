#!/usr/bin/env bash
# Compressed gradient reduction (issue 17, parallel.dp_compress) on 2
# data-parallel ranks, against the fp32 all-reduce of the same run. The error
# bounds it holds (docs/training.md, "Gradient compression"):
#   bf16, fp16  every step's loss within 1e-3 relative of fp32's
#   sign        it learns (the last loss at least 0.25 under the first) and its
#               last loss is within 10% of fp32's; the DP bytes per step are
#               under 1/8 of fp32's
# bf16 and fp16 send half the bytes. The start-up summary names the method;
# a ZeRO stage above 0 or an unknown name is one clear error.
# Usage: test_dp_compress.sh PATH/TO/scaletrain REPO_ROOT
. "$(dirname "$0")/lib.sh"
st_cli_init "$@"
command -v mpirun >/dev/null || { echo "SKIP: mpirun not found (apt-get install openmpi-bin)"; exit 0; }

st_small_data 100000
st_tiny_train_args
loud=()  # without --quiet: the start-up summary names the method
for a in "${tiny[@]}"; do [ "$a" = --quiet ] || loud+=("$a"); done
tiny=("${loud[@]}")
args=("${tiny[@]}" --set training.global_batch_size=8 --set training.micro_batch_size=4
  --set training.steps=40 --set parallel.dp=2 --set parallel.bucket_mb=0.02)
for c in none bf16 fp16 sign; do
  timeout 300 mpirun -np 2 "$bin" "${args[@]}" --set "parallel.dp_compress=\"$c\"" --run-dir "$work/$c" \
    >"$work/$c.out" 2>&1 || fail "the $c run failed: $(tail -3 "$work/$c.out")"
done
grep -q "^gradient compression: sign (1 bit" "$work/sign.out" && pass=$((pass + 1)) ||
  fail "no compression line: $(grep -v '^step' "$work/sign.out" | head -8)"
if out=$($py - "$work" <<'PY'
import json, sys
w = sys.argv[1]
runs = {c: [json.loads(l) for l in open("%s/%s/metrics.jsonl" % (w, c))] for c in ("none", "bf16", "fp16", "sign")}
ref = runs["none"]
assert all(len(r) == 40 for r in runs.values()), {c: len(r) for c, r in runs.items()}
msg = []
for c in ("bf16", "fp16"):
    worst = max(abs(x["loss"] - y["loss"]) / y["loss"] for x, y in zip(runs[c], ref))
    assert worst <= 1e-3, "%s: losses differ from fp32 by %.3g relative" % (c, worst)
    half = runs[c][-1]["comm_bytes"]["dp"] / ref[-1]["comm_bytes"]["dp"]
    assert 0.45 < half < 0.55, "%s sends %.3f of fp32's bytes" % (c, half)
    msg.append("%s within %.2g" % (c, worst))
s = runs["sign"]
assert s[-1]["loss"] < s[0]["loss"] - 0.25, "sign did not learn: %.4f -> %.4f" % (s[0]["loss"], s[-1]["loss"])
gap = s[-1]["loss"] / ref[-1]["loss"] - 1
assert gap <= 0.10, "sign's last loss is %.1f%% over fp32's" % (100 * gap)
ratio = s[-1]["comm_bytes"]["dp"] / ref[-1]["comm_bytes"]["dp"]
assert ratio < 1 / 8, "sign sends %.3f of fp32's bytes" % ratio
msg.append("sign's last loss %+.1f%%, bytes x%.3f" % (100 * gap, ratio))
print("; ".join(msg))
PY
); then
  echo "ok compressed vs fp32: $out"; pass=$((pass + 1))
else
  fail "compressed vs fp32: $out"
fi

expect_error "parallel.dp_compress compresses ZeRO-0's all-reduce; with parallel.zero = 1" \
  "${args[@]}" --set parallel.dp=1 --set parallel.zero=1 --set 'parallel.dp_compress="sign"' --run-dir "$work/bad1"
expect_error "parallel.dp_compress = 'int8' is unknown; use \"none\", \"bf16\", \"fp16\" or \"sign\"" \
  "${args[@]}" --set parallel.dp=1 --set 'parallel.dp_compress="int8"' --run-dir "$work/bad2"
[ ! -e "$work/bad1/metrics.jsonl" ] && [ ! -e "$work/bad2/metrics.jsonl" ] && pass=$((pass + 1)) ||
  fail "a rejected config wrote a run"
echo "$pass passed, $fails failed"
[ $fails -eq 0 ]

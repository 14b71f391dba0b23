#!/usr/bin/env bash
# bench/gpu_calibrate's host side on a test double of its measurements
# (tests/fakes/gpu_calibrate_fake_device.cpp: figures made from known shares
# through the planner's roofline): the shares it fits and writes come back,
# the torch cross-check prints ours/torch and gives FlashAttention's share,
# the profile loads in `scaletrain plan` for a cluster of that GPU and is
# refused for another; no device: exit 77 and one line; a device the catalog
# does not hold, or --gpu naming another part: one error line, nothing written.
# Usage: gpu_calibrate_fake_run.sh PATH/TO/scaletrain REPO_ROOT PATH/TO/gpu_calibrate[_fake] [--no-device-only]
. "$(dirname "$0")/lib.sh"
st_cli_init "$1" "$2"
cal=$3
only_no_device=${4:-}
configs=(--config-dir "$root/configs")

# expect_fail RC "text" ENV... -- ARGS: one stderr line with the text, exit RC, no profile.
expect_fail() {
  local rc=$1 want=$2
  shift 2
  local envs=()
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done
  shift
  env "${envs[@]}" "$cal" --out "$work/bad.toml" "${configs[@]}" "$@" >"$work/out" 2>"$work/err"
  local got=$?
  if [ "$got" != "$rc" ] || ! grep -qF -- "$want" "$work/err" || [ "$(wc -l <"$work/err")" -ne 1 ] ||
    [ -e "$work/bad.toml" ] || [ -e "$work/bad.toml.tmp" ]; then
    fail "exit $got (want $rc) for $*: $(cat "$work/err")"
  else
    pass=$((pass + 1))
  fi
}

expect_fail 77 "gpu_calibrate: skipped: no CUDA device (" CUDA_VISIBLE_DEVICES= GPUCAL_FAKE_NO_DEVICE=1 -- --quick
if [ "$only_no_device" = "--no-device-only" ]; then
  echo "gpu_calibrate without a device: $pass passed, $fails failed"
  [ "$fails" = 0 ]
  exit
fi
expect_fail 1 "the catalog (configs/hardware) has no entry for the device 'Mystery GPU'" \
  GPUCAL_FAKE_DEVICE="Mystery GPU" -- --quick
expect_fail 1 "the device 'NVIDIA H100 80GB HBM3' is the catalog's h100-sxm, not h200 (--gpu); drop --gpu, or pass --gpu h100-sxm" \
  GPUCAL_FAKE_DEVICE="NVIDIA H100 80GB HBM3" -- --quick --gpu h200
expect_fail 1 "the device 'Custom board' has 132 SMs, the catalog's h100-pcie 114: another part" \
  GPUCAL_FAKE_DEVICE="Custom board" -- --quick --gpu h100-pcie

# torch's figures: a bf16 8192^3 GEMM at 600 TFLOP/s; SDPA at a share of 0.4
# of the bf16 peak by the planner's FlashAttention term (fwd 1, bwd 2.5).
$py - "$root/configs/hardware/gpus.toml" "$work/torch.toml" <<'PY'
import sys, tomllib
peak = tomllib.load(open(sys.argv[1], "rb"))["gpu"]["h200"]["bf16_tflops"] * 1e12
b, s, h = 4, 4096, 2048
total = 3.5 * 0.5 * 4 * b * s * s * h / (peak * 0.4 * s / (s + 256))
gemm = 2 * 8192 ** 3 / 600e12
open(sys.argv[2], "w").write(
    'torch = "2.9.0-test"\ndevice = "NVIDIA H200"\nsdpa_backend = "flash"\n'
    f"gemms_bf16 = [[8192, 8192, 8192, {gemm!r}]]\n"
    f"sdpa = [[{b}, {s}, {h}, 16, {total / 3.5!r}, {2.5 * total / 3.5!r}]]\n")
PY
if ! "$cal" --out "$work/h200.toml" --quick --torch "$work/torch.toml" "${configs[@]}" >"$work/out" 2>"$work/err"; then
  fail "calibration on the fake device: $(cat "$work/err")"
else
  pass=$((pass + 1))
fi
$py - "$work/h200.toml" "$work/out" <<'PY' || fail "the profile's figures (above)"
import re, sys, tomllib
prof, out = tomllib.load(open(sys.argv[1], "rb")), open(sys.argv[2]).read()
c = prof["calibration"]["h200"]
want = {"matmul_efficiency": (0.7, 1e-4), "fp16_matmul_efficiency": (0.72, 1e-4), "fp8_matmul_efficiency": (0.6, 2e-4),
        "tf32_matmul_efficiency": (0.65, 1e-4), "fp32_matmul_efficiency": (0.9, 1e-4),
        "hbm_efficiency": (4320 / 4800, 1e-4), "kernel_issue_us": (2.25, 1e-9), "attention_efficiency": (0.4, 1e-4)}
for key, (value, tol) in want.items():
    assert abs(c[key] - value) <= tol, (key, c[key], value)
assert c["device"] == "NVIDIA H200" and c["sm_count"] == 132 and c["mode"] == "quick", c
# The quick grid: tokens and hidden 2k and 8k, three shapes each (fp32: 2k only).
assert len(c["gemms_bf16"]) == 12 and len(c["gemms_fp32"]) == 3, (len(c["gemms_bf16"]), len(c["gemms_fp32"]))
assert len(c["measured_attention"]) == 1 and c["measured_attention"][0][:4] == [2, 2048, 2048, 16]
# ours/torch for the one shape both timed: ours from the profile's row.
ours = [r[3] for r in c["gemms_bf16"] if r[:3] == [8192, 8192, 8192]][0]
m = re.search(r"bf16 +8192 x +8192 x +8192: ours +([0-9.]+), torch +([0-9.]+) TFLOP/s, ours/torch ([0-9.]+)", out)
assert m, out
assert abs(float(m.group(2)) - 600) < 0.1 and abs(float(m.group(3)) - ours / 600) < 2e-3, (m.groups(), ours)
PY

# The planner: a cluster of H200s uses it (a different prediction), another GPU's cluster refuses it.
plan=(plan --model gpt3-1.3b --gpus 8 --json)
"$bin" "${plan[@]}" --cluster hgx-h200 >"$work/base.json" 2>"$work/err" || fail "plan without the profile: $(cat "$work/err")"
if "$bin" "${plan[@]}" --cluster hgx-h200 --hardware "$work/h200.toml" >"$work/cal.json" 2>"$work/err"; then
  $py - "$work/base.json" "$work/cal.json" <<'PY' && pass=$((pass + 1)) || fail "the calibrated plan equals the catalog's"
import json, sys
base, cal = (json.load(open(p)) for p in sys.argv[1:3])
assert base["step_time_s"] != cal["step_time_s"], (base["step_time_s"], cal["step_time_s"])
PY
else
  fail "plan with the profile: $(cat "$work/err")"
fi
"$bin" plan --model gpt3-1.3b --gpus 8 --cluster hgx-h200 --hardware "$work/h200.toml" >"$work/text" 2>&1
grep -qF "h200 calibrated on its own GPU: $work/h200.toml" "$work/text" && pass=$((pass + 1)) ||
  fail "the plan's text does not say the GPU is calibrated: $(head -3 "$work/text")"
if "$bin" "${plan[@]}" --cluster dgx-h100 --hardware "$work/h200.toml" >"$work/out" 2>"$work/err"; then
  fail "a profile of an H200 accepted for dgx-h100"
elif ! grep -qF "calibrates h200, but cluster dgx-h100 runs h100-sxm, so the calibration would change nothing; plan a cluster of the calibrated GPU (hgx-h200)" "$work/err" ||
  [ "$(wc -l <"$work/err")" -ne 1 ]; then
  fail "message for another GPU's cluster: $(cat "$work/err")"
else
  pass=$((pass + 1))
fi

echo "gpu_calibrate on a fake device: $pass passed, $fails failed"
[ "$fails" = 0 ]

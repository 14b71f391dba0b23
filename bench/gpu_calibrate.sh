#!/usr/bin/env bash
# Calibrates the planner on this machine's GPU: builds bench/gpu_calibrate
# (CUDA, its own build folder, without the training stack), times torch at a
# few of the same shapes where torch with CUDA is importable, measures (GEMMs
# by shape and precision, attention, streaming bandwidth, kernel issue time)
# and writes a [calibration.GPU] file for `scaletrain plan --hardware FILE`.
#
#   bench/gpu_calibrate.sh [--quick] [--out FILE] [--gpu NAME] [--budget-s S] [--build-dir DIR]
#
# --quick: under a minute of measuring; full: under 8 minutes on an H100/H200
# (the program's --budget-s stops it in time whatever the GPU). Building
# takes a few minutes more the first time.
#
# Exit codes: 0 the profile is written; 77 skipped: no GPU (one line says
# why; nothing measured or written; the automake/ctest "skipped" code);
# 2 bad arguments; 1 a failure (the message names it).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
quick=0
out="gpu-calibration.toml"
gpu=""
budget=""
build="$repo/build-gpucal"
usage="usage: bench/gpu_calibrate.sh [--quick] [--out FILE] [--gpu NAME] [--budget-s S] [--build-dir DIR]"

need_value() {
  if [ "$2" -lt 2 ]; then
    echo "gpu_calibrate.sh: $1 needs a value; $usage" >&2
    exit 2
  fi
}
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) quick=1; shift ;;
    --out) need_value "$1" $#; out="$2"; shift 2 ;;
    --gpu) need_value "$1" $#; gpu="$2"; shift 2 ;;
    --budget-s) need_value "$1" $#; budget="$2"; shift 2 ;;
    --build-dir) need_value "$1" $#; build="$2"; shift 2 ;;
    -h|--help) echo "$usage"; exit 0 ;;
    *) echo "gpu_calibrate.sh: unknown argument '$1'; $usage" >&2; exit 2 ;;
  esac
done
case "$out" in /*) ;; *) out="$PWD/$out" ;; esac
if [ ! -d "$(dirname "$out")" ] || [ ! -w "$(dirname "$out")" ]; then
  echo "gpu_calibrate.sh: cannot write $out (its folder does not exist or is not writable); pass --out to a writable path" >&2
  exit 2
fi
if [ -n "$budget" ] && ! [[ "$budget" =~ ^[0-9]+([.][0-9]+)?$ ]]; then
  echo "gpu_calibrate.sh: --budget-s must be a number of seconds, got '$budget'" >&2
  exit 2
fi

# A GPU first: without one there is nothing to build for.
if ! command -v nvidia-smi >/dev/null 2>&1; then
  echo "gpu_calibrate.sh: skipped: no GPU (nvidia-smi not found); run it on a machine with an NVIDIA GPU" >&2
  exit 77
fi
listed=$(nvidia-smi -L 2>&1) || true
if ! grep -q '^GPU [0-9]' <<<"$listed"; then
  echo "gpu_calibrate.sh: skipped: no GPU (nvidia-smi: $(head -n1 <<<"${listed:-no device listed}")); run it on a machine with an NVIDIA GPU" >&2
  exit 77
fi
first=$(grep -m1 '^GPU [0-9]' <<<"$listed" | sed 's/^GPU [0-9]*: *//; s/ *(UUID.*//')
# The device's architecture for nvcc (older drivers lack the query: sm_90).
cap=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n1 | tr -d ' ') || true
if [[ "$cap" =~ ^[0-9]+[.][0-9]+$ ]]; then
  arch=${cap/./}
else
  echo "gpu_calibrate.sh: nvidia-smi gives no compute capability; building for sm_90 (Hopper)"
  cap="9.0?"
  arch=90
fi
echo "gpu_calibrate.sh: $first (compute capability $cap); building in $build"

nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
if [ ! -x "$nvcc" ]; then
  echo "gpu_calibrate.sh: no CUDA toolkit to build with (nvcc not on PATH nor in /usr/local/cuda/bin); install it" >&2
  exit 1
fi
launcher=()
if command -v ccache >/dev/null 2>&1; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
fi
mkdir -p "$build"
log="$build/gpu_calibrate_build.log"
if ! { cmake -S "$repo" -B "$build" -DCMAKE_BUILD_TYPE=Release -DSCALETRAIN_TRAINING=OFF -DSCALETRAIN_CUDA=ON \
         -DCMAKE_CUDA_ARCHITECTURES="$arch" -DCMAKE_CUDA_COMPILER="$nvcc" "${launcher[@]}" &&
       cmake --build "$build" -j"$(nproc)" --target gpu_calibrate; } >"$log" 2>&1; then
  tail -n 30 "$log" >&2
  echo "gpu_calibrate.sh: the build failed (log: $log; missing packages? scripts/install-deps.sh installs them)" >&2
  exit 1
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
args=(--out "$out" --config-dir "$repo/configs")
[ "$quick" = 1 ] && args+=(--quick)
[ -n "$gpu" ] && args+=(--gpu "$gpu")
[ -n "$budget" ] && args+=(--budget-s "$budget")

# torch first: gpu_calibrate prints ours/torch and takes FlashAttention's
# share from its times.
torch_args=(--out "$tmp/torch.toml")
[ "$quick" = 1 ] && torch_args+=(--quick)
torch_rc=77
if command -v python3 >/dev/null 2>&1; then
  set +e
  timeout 300 python3 "$repo/bench/gpu_calibrate_torch.py" "${torch_args[@]}"
  torch_rc=$?
  set -e
else
  echo "torch cross-check: skipped: no python3"
fi
if [ "$torch_rc" = 0 ]; then
  args+=(--torch "$tmp/torch.toml")
elif [ "$torch_rc" != 77 ]; then
  echo "gpu_calibrate.sh: the torch cross-check failed (exit $torch_rc); calibrating without it" >&2
fi

# The program keeps to its budget; the timeout is a guard against a hang.
limit=$([ "$quick" = 1 ] && echo 240 || echo 720)
set +e
timeout "$limit" "$build/bench/gpu_calibrate" "${args[@]}"
rc=$?
set -e
if [ "$rc" = 124 ]; then
  echo "gpu_calibrate.sh: gpu_calibrate ran past ${limit} s and was stopped; nothing was written" >&2
  exit 1
fi
exit "$rc"

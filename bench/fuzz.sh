#!/usr/bin/env bash
# Builds the fuzz harnesses of tests/fuzz with clang (libFuzzer, ASan, UBSan)
# in build-fuzz/ and runs each for a fixed time, one after the other; prints
# the executions, executions per second, corpus growth and crashes of each.
# A benchmark, never run by the tests (their replay of the corpus is
# `ctest -R fuzz.replay`). Results: docs/reliability.md, "Fuzzing".
#
#   bench/fuzz.sh [--seconds N] [--build-dir DIR] [HARNESS...]
#
# N defaults to 60 per harness; HARNESS names (run_config, vocab, ...) pick
# some. Each run starts from the committed seeds and regression inputs plus
# what earlier runs added under DIR/fuzz-corpus/<name>/; a crash, leak,
# timeout or out-of-memory input is kept in DIR/fuzz-artifacts/<name>/ and
# the script exits 1. To keep one as a regression input, copy it to
# tests/fuzz/regressions/<name>/ once the parser is fixed.
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=60
build=build-fuzz
harnesses=()
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) seconds="$2"; shift 2 ;;
    --build-dir) build="$2"; shift 2 ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    -*) echo "error: unknown option $1; see $0 --help" >&2; exit 2 ;;
    *) harnesses+=("$1"); shift ;;
  esac
done
if ! [[ "$seconds" =~ ^[0-9]+$ ]] || [ "$seconds" -lt 1 ]; then
  echo "error: --seconds must be a whole number of seconds >= 1, got '$seconds'" >&2
  exit 2
fi
all=(run_config vocab token_shard safetensors checkpoint_manifest plan_csv hardware_catalog hf_merges)
if [ ${#harnesses[@]} -eq 0 ]; then harnesses=("${all[@]}"); fi
for h in "${harnesses[@]}"; do
  if [ ! -f "tests/fuzz/fuzz_$h.cpp" ]; then
    echo "error: no harness '$h'; the harnesses are: ${all[*]}" >&2
    exit 2
  fi
done

# clang and its libFuzzer runtime (Debian ships it apart from the compiler).
cxx=$(command -v clang++-14 || command -v clang++ || true)
fuzzer_rt() { echo "$("$cxx" -print-resource-dir)/lib/linux/libclang_rt.fuzzer-$(uname -m).a"; }
if [ -z "$cxx" ] || [ ! -f "$(fuzzer_rt)" ]; then
  if [ "$(id -u)" -eq 0 ]; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      clang-14 libclang-rt-14-dev libomp-14-dev >/dev/null
    cxx=$(command -v clang++-14)
  else
    echo "error: clang with libFuzzer not found; install it: apt-get install clang-14 libclang-rt-14-dev libomp-14-dev" >&2
    exit 1
  fi
fi

cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_COMPILER="$cxx" \
  -DSCALETRAIN_FUZZ=ON -DSCALETRAIN_TESTS=OFF >/dev/null
targets=()
for h in "${harnesses[@]}"; do targets+=("fuzz_$h"); done
cmake --build "$build" -j"$(nproc)" --target "${targets[@]}" >/dev/null

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1}
printf '%-20s %8s %12s %8s %8s %8s  %s\n' harness seconds executions exec/s corpus crashes artifact
status=0
for h in "${harnesses[@]}"; do
  work="$build/fuzz-corpus/$h"
  artifacts="$build/fuzz-artifacts/$h"
  log="$build/fuzz-logs/$h.log"
  mkdir -p "$work" "$artifacts" "$(dirname "$log")"
  dict=()
  if [ -f "tests/fuzz/dicts/$h.dict" ]; then dict=(-dict="tests/fuzz/dicts/$h.dict"); fi
  seeds=("tests/fuzz/corpus/$h")
  if [ -d "tests/fuzz/regressions/$h" ]; then seeds+=("tests/fuzz/regressions/$h"); fi
  before=$(find "$artifacts" -type f | wc -l)
  start=$(date +%s)
  # New inputs go to the first directory only; the committed ones are read.
  rc=0
  "$build/tests/fuzz/fuzz_$h" -max_total_time="$seconds" -timeout=10 -print_final_stats=1 \
    -artifact_prefix="$artifacts/" "${dict[@]}" "$work" "${seeds[@]}" >"$log" 2>&1 || rc=$?
  elapsed=$(( $(date +%s) - start ))
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  units=$(find "$work" -type f | wc -l)
  crashes=$(( $(find "$artifacts" -type f | wc -l) - before ))
  newest=$(ls -t "$artifacts" 2>/dev/null | head -1)
  if [ "$rc" -ne 0 ] && [ "$crashes" -eq 0 ]; then
    echo "error: fuzz_$h exited with $rc without an artifact; see $log" >&2
    status=1
  fi
  if [ "$crashes" -gt 0 ]; then status=1; fi
  printf '%-20s %8s %12s %8s %8s %8s  %s\n' "$h" "$elapsed" "${execs:-?}" "${rate:-?}" "$units" \
    "$crashes" "$([ "$crashes" -gt 0 ] && echo "$artifacts/$newest" || echo -)"
done
exit "$status"

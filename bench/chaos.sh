#!/usr/bin/env bash
# The long chaos run: tests/chaos/chaos.sh with many trials of each failure at
# random moments (default 20 each), printing one line per trial and a table of
# outcomes (recorded in docs/reliability.md). The test suite runs one trial of
# each (tests/cli/test_chaos_quick.sh).
#
# Usage: bench/chaos.sh [--trials N] [--cases a,b,...] [--seed S] [--build-dir DIR]
set -eu
cd "$(dirname "$0")/.."
. bench/lib.sh
build=build
args=(--trials 20)
while [ $# -gt 0 ]; do
  case $1 in
    --build-dir) build=$2; shift 2 ;;
    --trials | --cases | --seed) args+=("$1" "$2"); shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
st_build_and_data "$build"
st_require_mpirun
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); $(date -u +%FT%TZ)"
exec bash tests/chaos/chaos.sh "$bin" "$(pwd)" "${args[@]}"

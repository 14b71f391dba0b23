#!/usr/bin/env bash
# Runs a command that must fail: a non-zero exit within LIMIT_S seconds,
# with output matching every REGEX (extended grep, multi-line output).
#   expect_failure.sh [--launcher-rc-any] LIMIT_S REGEX... -- COMMAND [ARGS...]
# --launcher-rc-any: do not require a non-zero exit of COMMAND itself (mpirun
# --enable-recovery exits 0 whatever its ranks do; the ranks' own exit codes
# are then printed by a wrapper and matched by a REGEX instead).
set -u
check_rc=1
if [ "$1" = "--launcher-rc-any" ]; then check_rc=0; shift; fi
limit_s=$1
shift
regexes=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do regexes+=("$1"); shift; done
shift  # the --
out=$(mktemp)
trap 'rm -f "$out"' EXIT
start_ns=$(date +%s%N)
# The outer timeout only keeps a broken watchdog from hanging ctest.
timeout --kill-after=5 $((limit_s + 30)) "$@" >"$out" 2>&1
rc=$?
elapsed_ms=$(( ($(date +%s%N) - start_ns) / 1000000 ))
cat "$out"
echo "--- exit code $rc after ${elapsed_ms} ms (limit ${limit_s} s)"
fail=0
if [ "$check_rc" -eq 1 ] && [ "$rc" -eq 0 ]; then echo "FAIL: the command succeeded"; fail=1; fi
if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 -a "$elapsed_ms" -gt $((limit_s * 1000 + 30000)) ]; then
  echo "FAIL: killed by the outer timeout"; fail=1
fi
if [ "$elapsed_ms" -gt $((limit_s * 1000)) ]; then echo "FAIL: took longer than ${limit_s} s"; fail=1; fi
for regex in "${regexes[@]}"; do
  if ! grep -Eq -- "$regex" "$out"; then echo "FAIL: output does not match: $regex"; fail=1; fi
done
exit $fail

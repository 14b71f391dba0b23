#!/usr/bin/env bash
# bench/gpu_calibrate.sh without a GPU: one line on stderr saying it skipped
# and why, exit code 77 (the documented "skipped" code), nothing built or
# written; bad arguments: one line naming the fix, exit code 2. Runs the same
# on a machine with a GPU: the GPU is hidden by a PATH without nvidia-smi or
# with a stand-in that fails as nvidia-smi does without a driver. (The
# calibration itself needs a GPU: docs/planner.md, "A GPU's own calibration".)
# Usage: test_gpu_calibrate_cli.sh PATH/TO/scaletrain REPO_ROOT
. "$(dirname "$0")/lib.sh"
st_cli_init "$@"
script=$root/bench/gpu_calibrate.sh
bash=$(command -v bash)

# expect RC "stderr text" PATH ARGS...: the script with that PATH exits RC
# with exactly one stderr line containing the text, writes no profile and
# makes no build folder.
expect() {
  local rc=$1 want=$2 path=$3
  shift 3
  PATH=$path "$bash" "$script" --out "$work/profile.toml" --build-dir "$work/build" "$@" \
    >"$work/out" 2>"$work/err"
  local got=$?
  if [ "$got" != "$rc" ]; then
    fail "exit $got, not $rc, for '$*': $(cat "$work/err")"
  elif ! grep -qF -- "$want" "$work/err"; then
    fail "stderr for '$*' lacks '$want': $(cat "$work/err")"
  elif [ "$(wc -l <"$work/err")" -ne 1 ]; then
    fail "not one stderr line for '$*': $(cat "$work/err")"
  elif [ -e "$work/profile.toml" ] || [ -e "$work/build" ]; then
    fail "'$*' wrote a profile or a build folder"
  else
    pass=$((pass + 1))
  fi
}

# A PATH with the tools the script needs before its GPU check, and none else.
mkdir -p "$work/bin-none" "$work/bin-nodriver" "$work/bin-empty"
for dir in bin-none bin-nodriver bin-empty; do
  for tool in dirname head sed grep tr; do ln -s "$(command -v $tool)" "$work/$dir/$tool"; done
done
expect 77 "gpu_calibrate.sh: skipped: no GPU (nvidia-smi not found); run it on a machine with an NVIDIA GPU" \
  "$work/bin-none"
expect 77 "gpu_calibrate.sh: skipped: no GPU (nvidia-smi not found)" "$work/bin-none" --quick

# nvidia-smi present but without a driver (its own message), or listing nothing.
cat >"$work/bin-nodriver/nvidia-smi" <<'SH'
#!/bin/sh
echo "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."
exit 9
SH
printf '#!/bin/sh\nexit 0\n' >"$work/bin-empty/nvidia-smi"
chmod +x "$work/bin-nodriver/nvidia-smi" "$work/bin-empty/nvidia-smi"
expect 77 "skipped: no GPU (nvidia-smi: NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.)" \
  "$work/bin-nodriver"
expect 77 "skipped: no GPU (nvidia-smi: no device listed)" "$work/bin-empty"

# Bad arguments, checked before anything else.
expect 2 "gpu_calibrate.sh: unknown argument '--fast'; usage: bench/gpu_calibrate.sh [--quick]" "$work/bin-none" --fast
expect 2 "gpu_calibrate.sh: --gpu needs a value" "$work/bin-none" --gpu
expect 2 "gpu_calibrate.sh: --budget-s must be a number of seconds, got 'soon'" "$work/bin-none" --budget-s soon
PATH=$work/bin-none "$bash" "$script" --out "$work/missing/p.toml" >"$work/out" 2>"$work/err"
rc=$?
if [ "$rc" != 2 ] || ! grep -qF "cannot write $work/missing/p.toml (its folder does not exist or is not writable); pass --out to a writable path" "$work/err"; then
  fail "unwritable --out: exit $rc: $(cat "$work/err")"
else
  pass=$((pass + 1))
fi

echo "gpu_calibrate.sh: $pass passed, $fails failed"
[ "$fails" = 0 ]

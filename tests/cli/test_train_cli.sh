#!/usr/bin/env bash
# The scaletrain binary end to end: data prepare -> train -> sample, and each
# kind of bad input: one clear error line, a non-zero exit, nothing damaged;
# and the help: the commands in the usual order with an example each, plan's
# examples and required flags first, an unknown command an error.
# Usage: test_train_cli.sh PATH/TO/scaletrain REPO_ROOT
set -u
bin=$1
root=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fails=0
pass=0
ok() { pass=$((pass + 1)); }
bad() { echo "FAIL: $*"; fails=$((fails + 1)); }

# expect_error NAME PATTERN CMD...: non-zero exit and stderr containing PATTERN.
expect_error() {
  local name=$1 pattern=$2
  shift 2
  "$@" >"$work/out" 2>"$work/err"
  local rc=$?
  if [ $rc -eq 0 ]; then bad "$name: exit 0"; return; fi
  if ! grep -q -- "$pattern" "$work/err"; then
    bad "$name: stderr lacks '$pattern':"; cat "$work/err"; return
  fi
  if [ "$(grep -c '^error:' "$work/err")" -ne 1 ]; then bad "$name: not exactly one error line"; cat "$work/err"; return; fi
  ok
}

tiny=(--set model.n_layer=2 --set model.n_head=2 --set model.n_embd=32 --set model.block_size=32
      --set training.global_batch_size=8 --set training.micro_batch_size=4 --set training.threads=1
      --set training.eval_interval=5 --set training.eval_steps=2 --set training.sample_tokens=40
      --set checkpoint.interval=5
      --set "data.train=\"$work/data/train.bin\"" --set "data.val=\"$work/data/val.bin\"")
cfg=$root/configs/shakespeare_char.toml

# --- the happy path --------------------------------------------------------
head -c 200000 "$root/data/tinyshakespeare.txt" >"$work/small.txt"
"$bin" data prepare --input "$work/small.txt" --output "$work/data" --val-fraction 0.1 >"$work/out" 2>&1 \
  && grep -q "vocab" "$work/out" && ok || { bad "data prepare"; cat "$work/out"; }
"$bin" train --config "$cfg" "${tiny[@]}" --set training.steps=10 --run-dir "$work/run" >"$work/train.out" 2>&1 \
  && ok || { bad "train"; cat "$work/train.out"; }
grep -qE '^step +10/10 \| loss [0-9.]+ \| lr .* ms \| .* tok/s \| ETA' "$work/train.out" && ok || { bad "progress line format"; cat "$work/train.out"; }
grep -q 'val loss' "$work/train.out" && ok || bad "no validation line"
grep -q -- '--- sample' "$work/train.out" && ok || bad "no sample at the end"
[ "$(wc -l <"$work/run/metrics.jsonl")" -eq 10 ] && ok || bad "metrics.jsonl should have 10 lines"
[ -f "$work/run/checkpoints/step_00000010/manifest.json" ] && ok || bad "final checkpoint missing"
"$bin" sample --checkpoint "$work/run" --prompt "ROMEO:" --tokens 20 --threads 1 >"$work/sample.out" 2>&1 \
  && grep -q '^ROMEO:' "$work/sample.out" && ok || { bad "sample"; cat "$work/sample.out"; }

# --- bad input -------------------------------------------------------------
# An unknown --set key blames the flag, not the config file, and suggests the nearest.
expect_error "unknown key" "^error: --set training.stepz: unknown config key 'training.stepz'; did you mean 'training.steps'?" \
  "$bin" train --config "$cfg" "${tiny[@]}" --set training.stepz=3 --run-dir "$work/r1"
expect_error "key in the wrong section" "did you mean 'parallel.dp'?" \
  "$bin" train --config "$cfg" "${tiny[@]}" --set training.dp=2 --run-dir "$work/r1"
expect_error "plan --train-config --set" "^error: --train-config: --set parallel.zeroo: unknown config key 'parallel.zeroo'; did you mean 'parallel.zero'?" \
  "$bin" plan --train-config "$cfg" --cluster dgx-h100 "${tiny[@]}" --set parallel.zeroo=1
expect_error "wrong type" "must be an integer" \
  "$bin" train --config "$cfg" "${tiny[@]}" --set 'model.n_layer="two"' --run-dir "$work/r1"
expect_error "heads" "not divisible by model.n_head" \
  "$bin" train --config "$cfg" "${tiny[@]}" --set model.n_head=3 --run-dir "$work/r1"
expect_error "batch" "multiple of micro_batch_size" \
  "$bin" train --config "$cfg" "${tiny[@]}" --set training.global_batch_size=10 --run-dir "$work/r1"
expect_error "missing config" "cannot open config file" \
  "$bin" train --config "$work/nope.toml" --run-dir "$work/r1"
expect_error "missing shard" "data prepare" \
  "$bin" train --config "$cfg" "${tiny[@]}" --set "data.train=\"$work/none/train.bin\"" --run-dir "$work/r1"
[ ! -e "$work/r1/metrics.jsonl" ] && ok || bad "a failed start wrote metrics"

cp "$work/data/train.bin" "$work/trunc.bin"
truncate -s -100 "$work/trunc.bin"
expect_error "truncated shard" "trunc.bin" \
  "$bin" train --config "$cfg" "${tiny[@]}" --set "data.train=\"$work/trunc.bin\"" --run-dir "$work/r2"

sum_before=$(cat "$work"/run/checkpoints/*/* | md5sum)
expect_error "checkpoint of another model" "different model" \
  "$bin" train --config "$cfg" "${tiny[@]}" --set model.n_embd=64 --set training.steps=20 --resume "$work/run" --run-dir "$work/r3"
[ "$(cat "$work"/run/checkpoints/*/* | md5sum)" = "$sum_before" ] && ok || bad "checkpoint changed by a refused resume"
expect_error "rerun into existing run dir" "already holds a run" \
  "$bin" train --config "$cfg" "${tiny[@]}" --set training.steps=10 --run-dir "$work/run"
[ "$(wc -l <"$work/run/metrics.jsonl")" -eq 10 ] && ok || bad "metrics.jsonl changed by a refused run"
expect_error "prepare missing input" "none.txt not found" \
  "$bin" data prepare --input "$work/none.txt" --output "$work/d2"
expect_error "sample without checkpoint" "checkpoint" \
  "$bin" sample --checkpoint "$work/none"

# --- the command line teaches ------------------------------------------------
# A word that is no command is an error, also with --help (not the main help and exit 0).
expect_error "unknown command" "^error: unknown command 'nosuchcommand'; commands: data, train, report" \
  "$bin" nosuchcommand --help
expect_error "misspelt command" "did you mean 'train'?" "$bin" tarin --config "$cfg"
# The main help lists the commands in the order a user meets them, with an
# example of each; every example names a command that exists.
"$bin" --help >"$work/help.txt" 2>&1 && ok || bad "scaletrain --help exited non-zero"
listed=$(sed -n '/^Subcommands:/,/^$/p' "$work/help.txt" | awk 'NF && !/Subcommands/ {print $1}' | tr '\n' ' ')
[ "$listed" = "data train report sample export import bench plan launch " ] && ok || bad "commands in order: '$listed'"
examples=$(grep -oE '^ +([0-9]\. +)?[a-z]+( prepare)? +scaletrain [a-z]+' "$work/help.txt" | awk '{print $NF}' | tr '\n' ' ')
[ "$examples" = "data train report sample export import bench plan launch " ] && ok || bad "one example per command, in order: '$examples'"
# plan --help opens with three examples, before the usage line and the flags,
# and lists the required flags first.
"$bin" plan --help >"$work/plan_help.txt" 2>&1 && ok || bad "plan --help exited non-zero"
n=$(sed '/^Usage:/q' "$work/plan_help.txt" | grep -c '^  scaletrain plan --model ')
[ "$n" -eq 3 ] && ok || bad "plan --help: $n examples before the usage line"
first_group=$(awk '/^Options:/ {f = 1; next} f && /^[A-Z].*:$/ {print; exit}' "$work/plan_help.txt")
case "$first_group" in "Required: "*) ok ;; *) bad "plan --help: the first group is '$first_group'" ;; esac

echo "$pass passed, $fails failed"
[ $fails -eq 0 ]

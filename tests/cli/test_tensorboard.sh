#!/usr/bin/env bash
# TensorBoard event files (telemetry.tensorboard, on by default): a 2-rank
# data-parallel run and its resumption write RUN/tb/events.out.tfevents.*,
# which the `tensorboard` package's own reader (CRCs checked) reads back with
# every scalar equal to metrics.jsonl and memory.json; a corrupted byte is
# refused by that reader; telemetry.tensorboard = false writes none; a tb path
# that cannot be a folder is one error naming the key to turn it off.
# Usage: test_tensorboard.sh PATH/TO/scaletrain REPO_ROOT
. "$(dirname "$0")/lib.sh"
st_cli_init "$@"

if ! "$py" -c "import tensorboard" 2>/dev/null; then
  echo "SKIP: the tensorboard Python package is not installed (scripts/install-deps.sh installs it)"
  exit 0
fi
st_small_data 200000
st_tiny_train_args
run=$work/run
if ! mpirun -np 2 "$bin" "${tiny[@]}" --set parallel.dp=2 --set training.global_batch_size=16 \
    --set training.steps=6 --set training.eval_interval=3 --set checkpoint.interval=3 \
    --run-dir "$run" >"$work/out" 2>&1; then
  fail "the 2-rank run did not train: $(tail -5 "$work/out")"
fi
if ! mpirun -np 2 "$bin" "${tiny[@]}" --set parallel.dp=2 --set training.global_batch_size=16 \
    --set training.steps=10 --set training.eval_interval=3 --set checkpoint.interval=3 \
    --resume "$run" >"$work/out" 2>&1; then
  fail "the resumed run did not train: $(tail -5 "$work/out")"
fi
files=$(ls "$run"/tb/events.out.tfevents.* 2>/dev/null | wc -l)
[ "$files" -eq 2 ] && pass=$((pass + 1)) || fail "expected 2 event files (run and resumption), found $files"
if out=$("$py" "$root/tests/cli/tb_check.py" "$run" 2>&1); then
  echo "$out"; pass=$((pass + 1))
else
  fail "tb_check: $out"
fi
# Negative control: the reader must notice a damaged record.
first=$(ls "$run"/tb/events.out.tfevents.* | head -1)
if out=$("$py" "$root/tests/cli/tb_check.py" --corrupt "$first" 2>&1); then
  echo "$out"; pass=$((pass + 1))
else
  fail "corruption: $out"
fi

"$bin" "${tiny[@]}" --set training.steps=2 --set telemetry.tensorboard=false --run-dir "$work/off" >/dev/null 2>&1 \
  || fail "telemetry.tensorboard=false did not train"
[ ! -e "$work/off/tb" ] && pass=$((pass + 1)) || fail "telemetry.tensorboard=false wrote $work/off/tb"

mkdir -p "$work/blocked" && touch "$work/blocked/tb"
expect_error "telemetry.tensorboard = false" "${tiny[@]}" --set training.steps=2 --run-dir "$work/blocked"

echo "test_tensorboard: $pass passed, $fails failed"
[ "$fails" -eq 0 ]

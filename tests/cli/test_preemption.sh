#!/usr/bin/env bash
# Preemption and integrity (issue 19), end to end with real signals:
#  - a 2-rank run sent SIGTERM (to one rank) mid-run stops at a step boundary,
#    writes a complete checkpoint of that step and exits with code 75; the
#    same command run again (--resume auto, same --run-dir) finishes the run
#    with every step's loss and the final parameters bitwise equal to an
#    uninterrupted run's;
#  - the same for SIGUSR1 sent to the launcher (mpirun forwards it);
#  - SIGTERM during a long evaluation stops within a round of evaluation
#    batches (exit 75, a checkpoint), not after the whole evaluation;
#  - one process: a first SIGINT stops with a checkpoint (75), a second one
#    ends the process at once (130);
#  - a flipped byte in the newest checkpoint's largest file: resuming that
#    checkpoint fails naming the file and the checksum; --resume auto falls
#    back to the previous checkpoint, warns naming the damaged one, and still
#    finishes bitwise equal to the uninterrupted run;
#  - --resume auto on a run already at training.steps (a requeued job that had
#    finished) exits 0 saying so, and leaves the run as it was.
# Usage: test_preemption.sh PATH/TO/scaletrain REPO_ROOT
. "$(dirname "$0")/lib.sh"
st_cli_init "$@"
command -v mpirun >/dev/null || { echo "SKIP: mpirun not found (apt-get install openmpi-bin)"; exit 0; }

st_small_data 100000
steps=2000
args=(train --config "$root/configs/shakespeare_char.toml" --quiet
  --set model.n_layer=2 --set model.n_head=2 --set model.n_embd=32 --set model.block_size=32
  --set training.global_batch_size=8 --set training.micro_batch_size=4 --set training.threads=1
  --set training.eval_interval=0 --set training.eval_steps=1 --set training.sample_tokens=0
  --set checkpoint.interval=100 --set checkpoint.keep_last=3 --set training.steps=$steps
  --set "data.train=\"$work/data/train.bin\"" --set "data.val=\"$work/data/val.bin\"")
dp2=(--set parallel.dp=2)

# Losses of every step and the final parameters, bit for bit.
same_as_ref() {  # same_as_ref RUN
  $py - "$work/ref" "$1" "$root/tests/cli" <<'PY'
import glob, json, sys
sys.path.insert(0, sys.argv[3])
import numpy as np
from checkpoint_io import load_checkpoint
ref, run = sys.argv[1], sys.argv[2]
a = [json.loads(l) for l in open(ref + "/metrics.jsonl")]
b = [json.loads(l) for l in open(run + "/metrics.jsonl")]
bad = []
if [x["step"] for x in a] != [x["step"] for x in b]:
    bad.append(f"steps differ: {len(a)} vs {len(b)} records")
bad += [f"step {x['step']}: loss {x['loss']!r} vs {y['loss']!r}" for x, y in zip(a, b) if x["loss"] != y["loss"]][:3]
pa = load_checkpoint(sorted(glob.glob(ref + "/checkpoints/step_*"))[-1])
pb = load_checkpoint(sorted(glob.glob(run + "/checkpoints/step_*"))[-1])
bad += [f"final {k} differs" for k in pa if not np.array_equal(pa[k], pb[k])][:3]
print("; ".join(bad) if bad else f"{len(b)} steps and the final parameters bitwise equal")
sys.exit(1 if bad else 0)
PY
}

timeout 300 mpirun -np 2 "$bin" "${args[@]}" "${dp2[@]}" --run-dir "$work/ref" >"$work/out" 2>&1 \
  || { echo "FAIL: the uninterrupted run:"; cat "$work/out"; exit 1; }

preempt() {  # preempt NAME HOW: HOW is "rank1 TERM" or "launcher USR1"
  local run=$work/$1 who=$2 sig=$3
  timeout 300 mpirun -np 2 "$bin" "${args[@]}" "${dp2[@]}" --run-dir "$run" --resume auto >"$work/out1" 2>&1 &
  local launcher=$!
  if ! st_wait_records "$run" 150 $launcher; then fail "$1: the run did not get going"; cat "$work/out1"; return; fi
  # $! is timeout's pid; mpirun is its child.
  if [ "$who" = rank1 ]; then kill -"$sig" "$(st_rank_pid "$run" 1)"; else kill -"$sig" "$(pgrep -P $launcher mpirun)"; fi
  wait $launcher
  local rc=$?
  local stopped
  stopped=$(wc -l <"$run/metrics.jsonl")
  if [ $rc -ne 75 ]; then fail "$1: exit code $rc after SIG$sig to the $who, expected 75"; cat "$work/out1"; return; fi
  if [ "$stopped" -ge $steps ]; then fail "$1: the run finished before the signal: lengthen it"; return; fi
  local ckpt=$run/checkpoints/$(printf 'step_%08d' "$stopped")
  [ -f "$ckpt/manifest.json" ] && [ -f "$ckpt/shard-00000.safetensors" ] && [ -f "$ckpt/shard-00001.safetensors" ] \
    && pass=$((pass + 1)) || { fail "$1: no complete checkpoint of step $stopped"; ls "$run/checkpoints"; return; }
  # The same command again continues it.
  if ! timeout 300 mpirun -np 2 "$bin" "${args[@]}" "${dp2[@]}" --run-dir "$run" --resume auto >"$work/out2" 2>&1; then
    fail "$1: the resumed run failed:"; cat "$work/out2"; return
  fi
  grep -q "resuming from $ckpt at step $stopped" "$work/out2" && pass=$((pass + 1)) \
    || fail "$1: did not resume from $ckpt: $(cat "$work/out2")"
  if out=$(same_as_ref "$run"); then
    echo "ok $1: SIG$sig to the $who at step $stopped, exit 75, resumed: $out"; pass=$((pass + 1))
  else
    fail "$1: $out"
  fi
}
preempt term_rank rank1 TERM
preempt usr1_launcher launcher USR1

# A stop request during a long evaluation (400,000 batches at step 5, a minute
# or more) stops within a round of batches, not after the whole evaluation:
# exit 75 well inside that time, a checkpoint of step 5, no validation loss.
long_eval=(--set training.eval_interval=5 --set training.eval_steps=400000)
timeout 300 mpirun -np 2 "$bin" "${args[@]}" "${dp2[@]}" "${long_eval[@]}" --run-dir "$work/eval" \
  >"$work/eval.out" 2>&1 &
launcher=$!
if st_wait_records "$work/eval" 4 $launcher; then
  sleep 1  # into the evaluation after step 5 (its record is written after it)
  start=$SECONDS
  kill -TERM "$(st_rank_pid "$work/eval" 1)"
  wait $launcher
  rc=$?
  took=$((SECONDS - start))
  if [ $rc -eq 75 ] && [ $took -lt 20 ] && [ -f "$work/eval/checkpoints/step_00000005/manifest.json" ] &&
      ! grep -q val_loss "$work/eval/metrics.jsonl"; then
    echo "ok stop during evaluation: exit 75 after ${took} s, checkpoint of step 5"; pass=$((pass + 1))
  else
    fail "stop during evaluation: rc $rc after ${took} s; $(ls "$work/eval/checkpoints" 2>/dev/null); $(tail -3 "$work/eval.out")"
  fi
else
  fail "the long-evaluation run did not get going: $(tail -3 "$work/eval.out")"
fi

# A finished run requeued (the same command once more) has nothing to do: it
# says so and exits 0, leaving the run as it was; naming its last checkpoint
# explicitly still asks to raise training.steps.
run=$work/usr1_launcher
before=$(md5sum <"$run/metrics.jsonl")
if timeout 300 mpirun -np 2 "$bin" "${args[@]}" "${dp2[@]}" --run-dir "$run" --resume auto >"$work/out" 2>&1 \
    && grep -q "already finished: checkpoint .*step_$(printf '%08d' $steps) is at training.steps = $steps" "$work/out" \
    && [ "$(md5sum <"$run/metrics.jsonl")" = "$before" ]; then
  pass=$((pass + 1))
else
  fail "--resume auto on a finished run: $(cat "$work/out")"
fi
if timeout 300 mpirun -np 2 "$bin" "${args[@]}" "${dp2[@]}" --run-dir "$work/again" \
    --resume "$run/checkpoints/step_$(printf '%08d' $steps)" >"$work/out" 2>&1; then
  fail "resuming a checkpoint at training.steps by name was accepted"
else
  grep -q "^error: .*raise training.steps" "$work/out" && pass=$((pass + 1)) \
    || fail "resuming a finished checkpoint by name: $(cat "$work/out")"
fi

# One process: SIGINT once stops with a checkpoint, twice ends it at once.
# (Not under timeout(1), which relays only the first SIGINT; ctest's time
# limit stops a hang.)
one=("$bin" "${args[@]}")
"${one[@]}" --run-dir "$work/int1" >"$work/out" 2>&1 &
pid=$!
st_wait_records "$work/int1" 100 $pid && kill -INT $pid
wait $pid
rc=$?
n=$(wc -l <"$work/int1/metrics.jsonl")
[ $rc -eq 75 ] && [ -f "$work/int1/checkpoints/$(printf 'step_%08d' "$n")/manifest.json" ] && pass=$((pass + 1)) \
  || fail "one SIGINT: exit code $rc, checkpoints $(ls "$work/int1/checkpoints")"
# The second SIGINT must come while the first is being acted on (a step of
# this wider model takes a few hundred milliseconds), and apart from it in
# time: two signals pending at once count as one.
"${one[@]}" --set model.n_embd=384 --set model.n_head=4 --set model.block_size=256 --run-dir "$work/int2" \
  >"$work/out" 2>&1 &
pid=$!
st_wait_records "$work/int2" 2 $pid && { kill -INT $pid; sleep 0.1; kill -INT $pid; }
wait $pid
rc=$?
[ $rc -eq 130 ] && grep -q "interrupted twice" "$work/out" && pass=$((pass + 1)) \
  || fail "two SIGINTs: exit code $rc (expected 130): $(cat "$work/out")"

# Integrity: flip a byte of the newest checkpoint's largest file.
run=$work/term_rank
newest=$(ls -d "$run"/checkpoints/step_* | sort | tail -1)
previous=$(ls -d "$run"/checkpoints/step_* | sort | tail -2 | head -1)
largest=$(ls -S "$newest"/*.safetensors | head -1)
$py -c "import sys; f=open(sys.argv[1],'r+b'); f.seek(-3,2); b=f.read(1); f.seek(-3,2); f.write(bytes([b[0]^1]))" "$largest"
rm -rf "$work/flip"
if timeout 300 mpirun -np 2 "$bin" "${args[@]}" "${dp2[@]}" --run-dir "$work/flip" --resume "$newest" >"$work/out" 2>&1; then
  fail "resuming a damaged checkpoint was accepted"
elif grep -q "^error: .*$largest: checksum failed" "$work/out"; then
  pass=$((pass + 1))
else
  fail "damaged checkpoint message lacks the file and 'checksum failed': $(cat "$work/out")"
fi
if timeout 300 mpirun -np 2 "$bin" "${args[@]}" "${dp2[@]}" --run-dir "$run" --resume auto >"$work/out" 2>&1 \
    && grep -q "warning: checkpoint $newest is damaged" "$work/out" \
    && grep -q "resuming from $previous" "$work/out" && out=$(same_as_ref "$run"); then
  echo "ok --resume auto fell back from the damaged $(basename "$newest") to $(basename "$previous"): $out"
  pass=$((pass + 1))
else
  fail "--resume auto with a damaged newest checkpoint: ${out:-} $(cat "$work/out")"
fi

echo "$pass passed, $fails failed"
[ $fails -eq 0 ]

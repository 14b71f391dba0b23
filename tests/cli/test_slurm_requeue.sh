#!/usr/bin/env bash
# scripts/slurm/train.sbatch on a real one-node Slurm cluster
# (scripts/slurm/local-cluster.sh: munged, slurmctld and slurmd from Debian,
# started here and stopped at the end, also on failure). Two ranks through
# srun --mpi=pmix:
#  - sbatch --test-only accepts the script;
#  - `scontrol requeue` mid-run: the ranks get SIGTERM, write a checkpoint and
#    exit 75; the requeued job resumes (--resume auto) and finishes;
#  - the time limit's warning (USR1 to the batch shell, as --signal=B:USR1@60
#    sends it): the script passes it to the ranks, they checkpoint and stop,
#    the script requeues the job, and it finishes;
#  in both cases the final parameters and every step's loss equal an
#  uninterrupted job's, bit for bit.
# Skips with one line where the packages or root are missing.
# Usage: test_slurm_requeue.sh PATH/TO/scaletrain REPO_ROOT
. "$(dirname "$0")/lib.sh"
st_cli_init "$@"
[ "$(id -u)" -eq 0 ] || { echo "SKIP: the local Slurm cluster needs root"; exit 0; }
for b in munged slurmctld slurmd; do
  [ -x "/usr/sbin/$b" ] || { echo "SKIP: $b not installed (apt-get install slurm-wlm munge)"; exit 0; }
done
command -v sbatch >/dev/null || { echo "SKIP: sbatch not installed (apt-get install slurm-wlm)"; exit 0; }

cluster=$root/scripts/slurm/local-cluster.sh
trap '"$cluster" down "$work/slurm" >/dev/null 2>&1; rm -rf "$work"' EXIT
if ! "$cluster" up "$work/slurm" >"$work/up.out" 2>&1; then
  echo "SKIP: slurmctld could not start here: $(tail -1 "$work/up.out")"
  exit 0
fi
export SLURM_CONF=$work/slurm/slurm.conf SCALETRAIN=$bin

st_small_data 100000
sbatch_script=$root/scripts/slurm/train.sbatch
train_args=("$root/configs/shakespeare_char.toml"
  --quiet --set model.n_layer=2 --set model.n_head=2 --set model.n_embd=32 --set model.block_size=32
  --set training.global_batch_size=8 --set training.micro_batch_size=4 --set training.threads=1
  --set training.eval_interval=0 --set training.eval_steps=1 --set training.sample_tokens=0
  --set checkpoint.interval=200 --set training.steps=3000 --set parallel.dp=2
  --set faults.slow_rank=0 --set faults.slow_ms=3
  --set "data.train=\"$work/data/train.bin\"" --set "data.val=\"$work/data/val.bin\"")
# faults.slow_ms holds each step to >= 3 ms (a sleep: the numbers are those of
# a plain run), so the 3000 steps take >= 9 s and the signal sent after the
# first 300 records lands mid-run: on an idle machine the whole run once took
# 1.2 s and ended before the requeue reached it.
one_node=(--nodes=1 --ntasks-per-node=2)

if sbatch --test-only "${one_node[@]}" "$sbatch_script" "${train_args[0]}" "$work/x" >"$work/out" 2>&1 \
    && grep -q "to start at" "$work/out"; then
  pass=$((pass + 1))
else
  fail "sbatch --test-only: $(cat "$work/out")"
fi

submit() {  # submit NAME -> job id
  sbatch --parsable "${one_node[@]}" -o "$work/$1.out" "$sbatch_script" "${train_args[0]}" "$work/$1" \
    "${train_args[@]:1}"
}
job_state() { scontrol show job "$1" 2>/dev/null | grep -o 'JobState=[A-Z_]*' | cut -d= -f2; }

# Waits for the job to end. A requeued job waits out Slurm's begin-time
# delay (two minutes); it is released as soon as the node has finished
# cleaning up after the job's previous run.
# slurmd needs a moment after a job's run has ended before the same job can
# start again ("launch failed" otherwise): release the requeued job once the
# node is idle, no slurmstepd of the job is left, and two seconds have passed.
pending_since=
release() {  # release JOB
  [ "$(sinfo -h -o %t)" = idle ] || return 0
  pgrep -f "slurmstepd: \[$1\." >/dev/null && return 0
  pending_since=${pending_since:-$SECONDS}
  [ $((SECONDS - pending_since)) -ge 2 ] || return 0
  scontrol update JobId="$1" StartTime=now 2>/dev/null
  pending_since=
}
# An empty state is scontrol not answering (slurmctld busy while other tests
# load the machine), not the job's end: it ends the wait only after 10 s.
last_state=
wait_done() {  # wait_done JOB
  local silent=0
  for _ in $(seq 1 900); do
    last_state=$(job_state "$1")
    case $last_state in
      COMPLETED) return 0 ;;
      FAILED | CANCELLED | TIMEOUT | NODE_FAIL | OUT_OF_MEMORY) return 1 ;;
      "") silent=$((silent + 1)); [ $silent -lt 50 ] || return 1 ;;
      PENDING) silent=0; release "$1" ;;
      *) silent=0 ;;
    esac
    sleep 0.2
  done
  return 1
}
ref=$(submit ref)
wait_done "$ref" || { echo "FAIL: the uninterrupted job: $(cat "$work/ref.out")"; exit 1; }

interrupt() {  # interrupt NAME HOW...
  local name=$1
  shift
  local job
  job=$(submit "$name")
  if ! st_wait_records "$work/$name" 300; then fail "$name: the job did not get going: $(cat "$work/$name.out")"; return; fi
  "$@" "$job"
  if ! wait_done "$job"; then
    fail "$name: the job did not finish (last state '${last_state}'): $(cat "$work/$name.out")"
    return
  fi
  if ! grep -q "exit code 75" "$work/$name.out" || ! grep -q "resuming from" "$work/$name.out"; then
    fail "$name: no stop with a checkpoint and resume: $(cat "$work/$name.out")"
    return
  fi
  if out=$($py - "$work/ref" "$work/$name" "$root/tests/cli" <<'PY'
import glob, json, sys
sys.path.insert(0, sys.argv[3])
import numpy as np
from checkpoint_io import load_checkpoint
ref, run = sys.argv[1], sys.argv[2]
a = [json.loads(l) for l in open(ref + "/metrics.jsonl")]
b = [json.loads(l) for l in open(run + "/metrics.jsonl")]
bad = [] if [x["step"] for x in a] == [x["step"] for x in b] else ["steps differ"]
bad += [f"step {x['step']}: loss differs" for x, y in zip(a, b) if x["loss"] != y["loss"]][:3]
pa = load_checkpoint(sorted(glob.glob(ref + "/checkpoints/step_*"))[-1])
pb = load_checkpoint(sorted(glob.glob(run + "/checkpoints/step_*"))[-1])
bad += [f"final {k} differs" for k in pa if not np.array_equal(pa[k], pb[k])][:3]
stopped = [l for l in open(run + "/../" + run.rsplit("/", 1)[1] + ".out") if "resuming from" in l]
print("; ".join(bad) if bad else f"{stopped[0].strip()}; {len(b)} steps and the final parameters bitwise equal")
sys.exit(1 if bad else 0)
PY
  ); then
    echo "ok $name: $out"; pass=$((pass + 1))
  else
    fail "$name: $out"
  fi
}
interrupt requeued scontrol requeue
interrupt time_limit scancel --batch --signal=USR1

echo "$pass passed, $fails failed"
[ $fails -eq 0 ]

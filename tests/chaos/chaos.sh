#!/usr/bin/env bash
# Chaos trials (issue 19): failures at random moments of a 2-rank data-parallel
# run, each checked for the outcome a user needs:
#   kill_rank      kill -9 of a random rank mid-step: the job ends within the
#                  watchdog time (comm_timeout_s = 5 s) and the launcher names
#                  the dead rank
#   kill_mid_save  kill -9 of a random rank while checkpoints are being written
#                  (one every step): every checkpoint directory is complete or
#                  absent, the newest intact one loads, and `--resume auto`
#                  finishes the run bitwise equal to an uninterrupted one
#   disk_full      the run directory's file system (a small tmpfs) fills up
#                  during a save: one clear error naming the cause, and the
#                  previous checkpoint still verifies and loads
#   read_only      the run directory becomes read-only mid-run (remount), and a
#                  run started in a read-only directory: one clear error each,
#                  the previous checkpoint intact
#   shard_removed  the training data shard is deleted mid-run: the run goes on
#                  (the shard is memory-mapped) and finishes; a restart then
#                  stops with an error naming the missing file
#   link_flap      across two emulated hosts (scripts/cluster.sh), one host's link
#                  goes down for 3 s, shorter than the watchdog (20 s here), at a
#                  random step, and comes back: the run continues and its losses and
#                  final parameters are bitwise those of an uninterrupted run
#   packet_loss    across two emulated hosts whose links lose 1% of the packets
#                  (vde2's wirefilter): the run completes, bitwise as uninterrupted
#   link_down      across two emulated hosts, one host's link goes down and stays
#                  down (60 s): the job ends within 25 s (mpirun's keepalives,
#                  scripts/cluster.sh, declare the host lost 6-11 s in, before the
#                  20-s watchdog), naming the host (mpirun) and the collective each
#                  rank was stuck in (the ranks' SIGTERM line); the newest checkpoint is intact, and once the
#                  link is back `--resume auto` finishes bitwise as uninterrupted
# Under the elastic launcher (scaletrain launch, three emulated hosts with etcd; each run must
# reach training.steps with every step once, each failure losing at most two checkpoint
# intervals (one save may be in flight), every launcher exiting 0, the final loss within 1% of one process's):
#   elastic_host_loss      a random host's link down at a random step (the leader's too)
#   elastic_mid_save       the same with a checkpoint every step (a write in flight)
#   elastic_second_failure a second host lost while the job restarts: it ends on one
#   elastic_host_returns   a host lost, back, taken at the next restart (a killed rank)
# Each trial prints one line "CASE trial N: ok|FAIL ..." and the script ends with a
# table of outcomes. Cases that need root and mount (disk_full, read_only), or
# root, network namespaces and vde2 (link_flap, packet_loss) are skipped with
# one line without them.
#
# Usage: tests/chaos/chaos.sh BIN REPO_ROOT [--trials N] [--cases a,b,...] [--seed S]
# (tests/cli/test_chaos_quick.sh runs one trial of each; bench/chaos.sh runs 20.)
set -u
bin=$1
root=$2
shift 2
trials=1
cases="kill_rank,kill_mid_save,disk_full,read_only,shard_removed,link_flap,packet_loss,link_down"
cases="$cases,elastic_host_loss,elastic_mid_save,elastic_second_failure,elastic_host_returns"
seed=$$
while [ $# -gt 0 ]; do
  case $1 in
    --trials) trials=$2; shift 2 ;;
    --cases) cases=$2; shift 2 ;;
    --seed) seed=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
RANDOM=$seed
py=/usr/bin/python3
. "$root/tests/cli/lib.sh"  # st_wait_records, st_rank_pid, st_start_etcd
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
work=$(mktemp -d)
mounts=()
cluster_dir=$work/cluster
cluster_up=""
launchers=()
etcd_pid=""
cleanup() {
  for p in "${launchers[@]}" $etcd_pid; do kill -9 "$p" 2>/dev/null; done
  [ -z "$cluster_up" ] || ST_CLUSTER_DIR=$cluster_dir "$root/scripts/cluster.sh" down >/dev/null 2>&1
  for m in "${mounts[@]}"; do umount -l "$m" 2>/dev/null; done
  pkill -9 -f "scaletrain train.*$work" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
declare -A ok_count fail_count notes

head -c 100000 "$root/data/tinyshakespeare.txt" >"$work/small.txt"
"$bin" data prepare --input "$work/small.txt" --output "$work/data" >/dev/null || { echo "FAIL: data prepare"; exit 1; }
model=(train --config "$root/configs/shakespeare_char.toml" --quiet
  --set model.n_layer=2 --set model.n_head=2 --set model.n_embd=64 --set model.block_size=32
  --set training.threads=1 --set training.eval_interval=0 --set training.eval_steps=1 --set training.sample_tokens=0
  --set checkpoint.keep_last=3 --set "data.val=\"$work/data/val.bin\"")
base=("${model[@]}" --set training.global_batch_size=8 --set training.micro_batch_size=4
  --set parallel.dp=2 --set parallel.comm_timeout_s=5)
train_data=(--set "data.train=\"$work/data/train.bin\"")

record() {  # record CASE TRIAL ok|FAIL DETAILS
  echo "$1 trial $2: $3 $4"
  if [ "$3" = ok ]; then ok_count[$1]=$(( ${ok_count[$1]:-0} + 1 )); else fail_count[$1]=$(( ${fail_count[$1]:-0} + 1 )); fi
}
lines() { [ -f "$1/metrics.jsonl" ] && wc -l <"$1/metrics.jsonl" || echo 0; }
# The output of the job training in RUN: kept outside RUN's file system, which
# some cases fill or make read-only.
out_of() { echo "$work/$(basename "$(dirname "$1")")_$(basename "$1").out"; }
launch() {  # launch RUN EXTRA... (background; sets $job)
  local run=$1
  shift
  mpirun -np 2 "$bin" "${base[@]}" "${train_data[@]}" "$@" --run-dir "$run" >"$(out_of "$run")" 2>&1 &
  job=$!
}
can_mount() { [ "$(id -u)" -eq 0 ] && mount -t tmpfs -o size=1m tmpfs "$work/probe" 2>/dev/null && umount "$work/probe"; }
mkdir -p "$work/probe"

# The bitwise reference for kill_mid_save: the same run, not interrupted.
reference_made=""
reference() {
  [ -n "$reference_made" ] && return 0
  mpirun -np 2 "$bin" "${base[@]}" "${train_data[@]}" --set training.steps=150 --set checkpoint.interval=1 \
    --run-dir "$work/reference" >"$work/reference.out" 2>&1 || { cat "$work/reference.out"; return 1; }
  reference_made=1
}
same_as_reference() {  # same_as_reference RUN
  $py - "$work/reference" "$1" "$root/tests/cli" <<'PY'
import glob, json, sys
sys.path.insert(0, sys.argv[3])
import numpy as np
from checkpoint_io import load_checkpoint
a = [json.loads(l) for l in open(sys.argv[1] + "/metrics.jsonl")]
b = [json.loads(l) for l in open(sys.argv[2] + "/metrics.jsonl")]
bad = [] if [x["step"] for x in a] == [x["step"] for x in b] else [f"{len(b)} records, expected {len(a)}"]
bad += [f"step {x['step']} loss differs" for x, y in zip(a, b) if x["loss"] != y["loss"]][:2]
pa = load_checkpoint(sorted(glob.glob(sys.argv[1] + "/checkpoints/step_*"))[-1])
pb = load_checkpoint(sorted(glob.glob(sys.argv[2] + "/checkpoints/step_*"))[-1])
bad += [f"final {k} differs" for k in pa if not np.array_equal(pa[k], pb[k])][:2]
print("; ".join(bad) if bad else "losses and final parameters bitwise equal")
sys.exit(1 if bad else 0)
PY
}

case_kill_rank() {  # trial
  local run=$work/kill_rank_$1 victim=$((RANDOM % 2)) after=$((20 + RANDOM % 200))
  launch "$run" --set training.steps=100000 --set checkpoint.interval=0
  if ! st_wait_records "$run" "$after" $job; then record kill_rank "$1" FAIL "run did not get going: $(tail -3 "$(out_of "$run")")"; return; fi
  local t0 t1 rc
  t0=$(date +%s.%N)
  kill -9 "$(st_rank_pid "$run" $victim)"
  wait $job
  rc=$?
  t1=$(date +%s.%N)
  local took
  took=$(echo "$t0 $t1" | awk '{printf "%.1f", $2 - $1}')
  if [ $rc -ne 0 ] && awk "BEGIN{exit !($took <= 15)}" && grep -q "rank $victim .*exited on signal 9" "$(out_of "$run")"; then
    record kill_rank "$1" ok "rank $victim killed at step ~$after; job ended in ${took} s (rc $rc), launcher names rank $victim"
  else
    record kill_rank "$1" FAIL "rank $victim killed: rc $rc after ${took} s; output: $(grep -v '^step' "$(out_of "$run")" | tail -4 | tr '\n' ' ')"
  fi
}

case_kill_mid_save() {
  reference || { record kill_mid_save "$1" FAIL "the reference run failed"; return; }
  local run=$work/kill_mid_save_$1 victim=$((RANDOM % 2)) after=$((5 + RANDOM % 120))
  launch "$run" --set training.steps=150 --set checkpoint.interval=1
  if ! st_wait_records "$run" "$after" $job; then record kill_mid_save "$1" FAIL "did not get going"; return; fi
  kill -9 "$(st_rank_pid "$run" $victim)"
  wait $job
  # Every checkpoint directory under its real name has its manifest (the
  # temporaries are .tmp-*), and resuming finishes the run bitwise.
  local incomplete=0 d
  for d in "$run"/checkpoints/step_*; do [ -f "$d/manifest.json" ] || incomplete=$((incomplete + 1)); done
  local tmps
  tmps=$(ls -d "$run"/checkpoints/.tmp-* 2>/dev/null | wc -l)
  if ! mpirun -np 2 "$bin" "${base[@]}" "${train_data[@]}" --set training.steps=150 --set checkpoint.interval=1 \
      --run-dir "$run" --resume auto >"$run.resume" 2>&1; then
    record kill_mid_save "$1" FAIL "resume failed: $(grep error "$run.resume" | head -2)"
    return
  fi
  local from out
  from=$(grep -o "resuming from .* at step [0-9]*" "$run.resume" | sed 's/.*at step //')
  if [ $incomplete -eq 0 ] && out=$(same_as_reference "$run"); then
    record kill_mid_save "$1" ok "rank $victim killed at step ~$after with a save in flight ($tmps unfinished .tmp left); resumed from step ${from:-0}: $out"
  else
    record kill_mid_save "$1" FAIL "incomplete step dirs: $incomplete; ${out:-}"
  fi
}

# A run in a tmpfs of SIZE; waits until checkpoint FIRST is complete, then
# does ACTION to the file system and waits for the run to end.
in_tmpfs() {  # in_tmpfs CASE TRIAL SIZE ACTION
  local mnt=$work/$1_$2
  mkdir -p "$mnt"
  mount -t tmpfs -o size="$3" tmpfs "$mnt" || { record "$1" "$2" FAIL "cannot mount a tmpfs"; return 1; }
  mounts+=("$mnt")
  local run=$mnt/run every=$((20 + RANDOM % 30))
  launch "$run" --set training.steps=100000 --set checkpoint.interval=$every
  local first
  first=$run/checkpoints/$(printf 'step_%08d' $every)
  for _ in $(seq 1 1500); do [ -f "$first/manifest.json" ] && break; sleep 0.02; done
  [ -f "$first/manifest.json" ] || { record "$1" "$2" FAIL "no first checkpoint: $(tail -3 "$(out_of "$run")")"; kill -9 $job; return 1; }
  sleep "0.$((RANDOM % 10))"
  $4 "$mnt" "$run"
  wait $job
  rc=$?
  first_checkpoint=$(newest_checkpoint "$run")
  tmpfs_run=$run
  return 0
}
fill() { dd if=/dev/zero of="$1/filler" bs=64k 2>/dev/null; }  # fill MOUNT
# Read-only from now on: a read-only bind mount over the run directory (a
# plain remount would be refused while the run holds files open for writing).
make_read_only() { mount --bind "$2" "$2" && mounts=("$2" "${mounts[@]}") && mount -o remount,bind,ro "$2"; }  # MOUNT RUN
# The newest checkpoint directory under its real name (it must be complete).
newest_checkpoint() { ls -d "$1"/checkpoints/step_* 2>/dev/null | sort | tail -1; }
# The previous checkpoint verifies and loads: resume it into another directory.
previous_loads() {  # previous_loads CHECKPOINT -> 0 if it resumes
  mpirun -np 2 "$bin" "${base[@]}" "${train_data[@]}" --set training.steps=$(( $(basename "$1" | sed 's/step_0*//') + 2 )) \
    --set checkpoint.interval=0 --resume "$1" --run-dir "$work/loads_$RANDOM" >"$work/loads.out" 2>&1
}

case_disk_full() {
  can_mount || { echo "disk_full: SKIP (needs root and mount)"; notes[disk_full]="skipped: no root/mount"; return; }
  in_tmpfs disk_full "$1" 4m fill || return
  local msg
  msg=$(grep '^error:' "$(out_of "$tmpfs_run")" | head -1)
  if [ $rc -ne 0 ] && [ "$(grep -c '^error:' "$(out_of "$tmpfs_run")")" -ge 1 ] && echo "$msg" | grep -qi "no space left\|disk full" \
      && previous_loads "$first_checkpoint"; then
    record disk_full "$1" ok "rc $rc, '$(echo "$msg" | cut -c1-110)...'; $(basename "$first_checkpoint") still loads"
  else
    record disk_full "$1" FAIL "rc $rc, error: ${msg:-none}; previous loads: $(tail -2 "$work/loads.out" 2>/dev/null | tr '\n' ' ')"
  fi
}

case_read_only() {
  can_mount || { echo "read_only: SKIP (needs root and mount)"; notes[read_only]="skipped: no root/mount"; return; }
  in_tmpfs read_only "$1" 64m make_read_only || return
  local msg
  msg=$(grep '^error:' "$(out_of "$tmpfs_run")" | head -1)
  local ok_mid=0
  if [ $rc -ne 0 ] && echo "$msg" | grep -qi "read-only\|cannot"; then ok_mid=1; fi
  # A run started in the read-only directory.
  local start_msg start_rc
  mpirun -np 2 "$bin" "${base[@]}" "${train_data[@]}" --set training.steps=5 --run-dir "$tmpfs_run/fresh" \
    >"$work/ro_start.out" 2>&1
  start_rc=$?
  start_msg=$(grep '^error:' "$work/ro_start.out" | head -1)
  if [ $ok_mid -eq 1 ] && [ $start_rc -ne 0 ] && echo "$start_msg" | grep -qi "read-only" && previous_loads "$first_checkpoint"; then
    record read_only "$1" ok "mid-run: rc $rc, '$(echo "$msg" | cut -c1-90)...'; at start: '$(echo "$start_msg" | cut -c1-80)...'; $(basename "$first_checkpoint") loads"
  else
    record read_only "$1" FAIL "mid-run rc $rc '${msg:-none}'; at start rc $start_rc '${start_msg:-none}'"
  fi
}

case_shard_removed() {
  local run=$work/shard_removed_$1 after=$((10 + RANDOM % 100))
  mkdir -p "$work/data_$1"
  cp "$work/data/train.bin" "$work/data_$1/train.bin"
  local shard=(--set "data.train=\"$work/data_$1/train.bin\"")
  mpirun -np 2 "$bin" "${base[@]}" "${shard[@]}" --set training.steps=400 --set checkpoint.interval=100 \
    --run-dir "$run" >"$(out_of "$run")" 2>&1 &
  job=$!
  st_wait_records "$run" "$after" $job || { record shard_removed "$1" FAIL "did not get going"; return; }
  rm "$work/data_$1/train.bin"
  wait $job
  rc=$?
  mpirun -np 2 "$bin" "${base[@]}" "${shard[@]}" --set training.steps=500 --run-dir "$run" --resume auto \
    >"$run.resume" 2>&1
  local rc2=$? msg
  msg=$(grep '^error:' "$run.resume" | head -1)
  if [ $rc -eq 0 ] && [ "$(lines "$run")" -eq 400 ] && [ $rc2 -ne 0 ] && echo "$msg" | grep -q "data_$1/train.bin"; then
    record shard_removed "$1" ok "removed at step ~$after: the run finished (memory-mapped); restart: '$(echo "$msg" | cut -c1-100)...'"
  else
    record shard_removed "$1" FAIL "run rc $rc ($(lines "$run") steps); restart rc $rc2 '${msg:-none}'"
  fi
}

# Two emulated hosts (scripts/cluster.sh up 2 ARGS...), replacing the last
# ones this script made; sets $cluster_args. Returns 1 (with a note) where
# the machine cannot make them.
cluster() {
  if [ "$(id -u)" -ne 0 ] || ! command -v ip >/dev/null || ! ip netns add st-chaos-probe 2>/dev/null; then
    return 1
  fi
  ip netns delete st-chaos-probe
  ST_CLUSTER_DIR=$cluster_dir "$root/scripts/cluster.sh" up "${cluster_hosts:-2}" --force "$@" >"$work/cluster.out" 2>&1 || return 1
  cluster_up=1
  mapfile -t cluster_args <"$cluster_dir/mpirun.args"
}
# Trains the reference's 150 steps across the hosts (background; sets $job);
# the watchdog at TIMEOUT s (default 20).
launch_across() {  # launch_across RUN [TIMEOUT] [EXTRA...]
  local run=$1 timeout=${2:-20}
  shift $(($# > 1 ? 2 : 1))
  mpirun "${cluster_args[@]}" -np 2 "$bin" "${base[@]}" "${train_data[@]}" --set training.steps=150 \
    --set checkpoint.interval=1 --set parallel.comm_timeout_s="$timeout" "$@" --run-dir "$run" >"$(out_of "$run")" 2>&1 &
  job=$!
}

case_link_flap() {
  reference || { record link_flap "$1" FAIL "the reference run failed"; return; }
  if ! cluster; then
    notes[link_flap]="skipped: needs root and network namespaces"; echo "link_flap trial $1: skipped (${notes[link_flap]})"
    return
  fi
  local run=$work/link_flap_$1 after=$((5 + RANDOM % 100)) host=st-h$((RANDOM % 2))
  launch_across "$run"
  st_wait_records "$run" "$after" $job || { record link_flap "$1" FAIL "did not get going: $(tail -3 "$(out_of "$run")")"; return; }
  ST_CLUSTER_DIR=$cluster_dir "$root/scripts/cluster.sh" link "$host" down >/dev/null
  local at_down at_up
  at_down=$(lines "$run")
  sleep 3
  at_up=$(lines "$run")  # the outage is real: at most the step in flight finished
  ST_CLUSTER_DIR=$cluster_dir "$root/scripts/cluster.sh" link "$host" up >/dev/null
  wait $job
  local rc=$? same
  same=$(same_as_reference "$run")
  if [ $rc -eq 0 ] && [ $((at_up - at_down)) -le 1 ] && [ "$same" = "losses and final parameters bitwise equal" ]; then
    record link_flap "$1" ok "$host's link down 3 s at step $at_down (steps done meanwhile: $((at_up - at_down))): the run finished, $same"
  else
    record link_flap "$1" FAIL "$host's link down 3 s at step $at_down: $((at_up - at_down)) steps done while down, rc $rc, $same; $(grep -v '^step' "$(out_of "$run")" | tail -3 | tr '\n' ' ')"
  fi
}

case_packet_loss() {
  reference || { record packet_loss "$1" FAIL "the reference run failed"; return; }
  if ! command -v wirefilter >/dev/null || ! cluster --loss 1; then
    notes[packet_loss]="skipped: needs root, network namespaces and vde2"; echo "packet_loss trial $1: skipped (${notes[packet_loss]})"
    return
  fi
  local run=$work/packet_loss_$1
  launch_across "$run"
  wait $job
  local rc=$? same
  same=$(same_as_reference "$run")
  if [ $rc -eq 0 ] && [ "$same" = "losses and final parameters bitwise equal" ]; then
    record packet_loss "$1" ok "1% of the packets lost between the hosts: the run finished, $same"
  else
    record packet_loss "$1" FAIL "1% loss: rc $rc, $same; $(grep -v '^step' "$(out_of "$run")" | tail -3 | tr '\n' ' ')"
  fi
}

case_link_down() {
  reference || { record link_down "$1" FAIL "the reference run failed"; return; }
  if ! cluster; then
    notes[link_down]="skipped: needs root and network namespaces"; echo "link_down trial $1: skipped (${notes[link_down]})"
    return
  fi
  local run=$work/link_down_$1 after=$((5 + RANDOM % 100)) victim=$((RANDOM % 2))
  local host=st-h$victim survivor=$((1 - victim))
  launch_across "$run" 20
  st_wait_records "$run" "$after" $job || { record link_down "$1" FAIL "did not get going: $(tail -3 "$(out_of "$run")")"; return; }
  local t0 rc took
  t0=$(date +%s.%N)
  ST_CLUSTER_DIR=$cluster_dir "$root/scripts/cluster.sh" link "$host" down >/dev/null
  # The job must end on its own while the link stays down (60 s at most here).
  for _ in $(seq 1 600); do kill -0 $job 2>/dev/null || break; sleep 0.1; done
  took=$(echo "$t0 $(date +%s.%N)" | awk '{printf "%.1f", $2 - $1}')
  kill -0 $job 2>/dev/null && kill $job
  wait $job
  rc=$?
  ST_CLUSTER_DIR=$cluster_dir "$root/scripts/cluster.sh" link "$host" up >/dev/null
  local out host_named collective_named
  out=$(out_of "$run")
  host_named=$(grep -cE "(on node $host\$|host $host \(rank $victim\) does not answer)" "$out")
  collective_named=$(grep -cE "rank $survivor: (SIGTERM while waiting in|watchdog:) [a-z_]+ of [0-9]+ bytes" "$out")
  if [ $rc -eq 0 ] || ! awk "BEGIN{exit !($took <= 25)}" || [ "$host_named" -lt 1 ] || [ "$collective_named" -lt 1 ]; then
    record link_down "$1" FAIL "$host's link down at step $after: rc $rc after ${took} s; $(grep -E 'error|lost communication' "$out" | head -2 | tr '\n' ' ')"
    return
  fi
  # The newest checkpoint is intact: the same command resumes from it and finishes as uninterrupted.
  mpirun "${cluster_args[@]}" -np 2 "$bin" "${base[@]}" "${train_data[@]}" --set training.steps=150 \
    --set checkpoint.interval=1 --set parallel.comm_timeout_s=20 --run-dir "$run" --resume auto >"$run.resume" 2>&1
  local rc2=$? same
  same=$(same_as_reference "$run")
  if [ $rc2 -eq 0 ] && [ "$same" = "losses and final parameters bitwise equal" ]; then
    record link_down "$1" ok "$host's link down at step $after: the job ended after ${took} s (rc $rc) naming $host and the collective ($(grep -oE "rank $survivor: (SIGTERM while waiting in|watchdog:) [a-z_]+ of [0-9]+ bytes on group '[a-z_]+'" "$out" | head -1)); resumed: $same"
  else
    record link_down "$1" FAIL "$host's link down at step $after: resume rc $rc2, $same; $(tail -2 "$run.resume" | tr '\n' ' ')"
  fi
}

# Under the elastic launcher: three emulated hosts, a `scaletrain launch` in
# each, etcd on the cluster's bridge (started per trial), a run of 12
# sequences a step (dp 3, 2 or 1 all divide it).
elastic_up() {  # elastic_up TRIAL: 1 where the machine cannot (a note is set)
  command -v etcd >/dev/null || return 1
  cluster_hosts=3 cluster || return 1
  st_start_etcd "$work/etcd_$1" "$work/etcd_$1.log"
}
elastic_down() {
  local p
  for p in "${launchers[@]}"; do
    for _ in $(seq 1 300); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
  done
  launcher_codes=""
  for p in "${launchers[@]}"; do
    kill -0 "$p" 2>/dev/null && kill -9 "$p"
    wait "$p"
    launcher_codes="$launcher_codes $?"
  done
  launchers=()
  kill -9 "$etcd_pid" 2>/dev/null
  wait "$etcd_pid" 2>/dev/null
  etcd_pid=""
}
elastic_launch() {  # elastic_launch RUN STEPS INTERVAL
  local i
  for i in 0 1 2; do
    ip netns exec st-h$i "$bin" launch --hostfile "$cluster_dir/hostfile" --mpirun-args-file "$cluster_dir/mpirun.args" \
      --etcd "$etcd_url" --host st-h$i --ttl 4 --takeover-wait 15 -- "${model[@]}" "${train_data[@]}" \
      --set training.global_batch_size=12 --set training.micro_batch_size=2 --set parallel.comm_timeout_s=60 \
      --set training.steps="$2" --set checkpoint.interval="$3" --run-dir "$1" >"$1.launch$i" 2>&1 &
    launchers+=($!)
  done
}
event_count() { local n; n=$(grep -c "\"event\":\"$2\"" "$1/events.jsonl" 2>/dev/null); echo "${n:-0}"; }  # RUN EVENT
wait_events() {  # wait_events RUN EVENT N SECONDS
  local i
  for i in $(seq 1 $((10 * $4))); do
    [ "$(event_count "$1" "$2")" -ge "$3" ] && return 0
    sleep 0.1
  done
  return 1
}
link() { ST_CLUSTER_DIR=$cluster_dir "$root/scripts/cluster.sh" link "$1" "$2" >/dev/null; }
# One process, the same steps: the loss an uninterrupted run ends at.
single_loss() {  # single_loss STEPS
  [ -f "$work/single_$1.loss" ] || {
    "$bin" "${model[@]}" "${train_data[@]}" --set training.global_batch_size=12 --set training.micro_batch_size=12 \
      --set training.steps="$1" --run-dir "$work/single_$1" >/dev/null 2>&1 &&
      tail -1 "$work/single_$1/metrics.jsonl" | $py -c 'import json,sys; print(json.load(sys.stdin)["loss"])' >"$work/single_$1.loss"
  }
  cat "$work/single_$1.loss"
}
# The outcome every elastic trial needs: each launcher exited 0, every step
# once, each failure lost at most 2 x INTERVAL steps, the final loss within 1%
# of one process's; prints the restarts' layouts.
elastic_verdict() {  # elastic_verdict RUN STEPS INTERVAL FAILURES (injected: each needs its record)
  [ "$launcher_codes" = " 0 0 0" ] || { echo "launcher exit codes$launcher_codes: $(tail -n 2 "$1".launch* | tr '\n' ' ')"; return 1; }
  $py - "$1" "$2" "$3" "$(single_loss "$2")" "$4" <<'PY'
import json, sys
run, steps, interval, ref = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
injected = int(sys.argv[5])
m = [json.loads(l) for l in open(run + "/metrics.jsonl")]
e = [json.loads(l) for l in open(run + "/events.jsonl")]
bad = []
if [r["step"] for r in m] != list(range(1, steps + 1)): bad.append("steps are not 1..%d once each" % steps)
lost = [f["steps_lost"] for f in e if f["event"] == "failure"]
# A save commits once every rank's background write is done, and the next
# save finishes it first: a failure with one in flight loses up to two intervals.
if any(l > 2 * interval for l in lost): bad.append(f"steps lost {lost} > 2 x interval {interval}")
if len(lost) < injected: bad.append(f"{len(lost)} failure record(s) for {injected} failure(s)")
if e[-1]["event"] != "done": bad.append("last event " + e[-1]["event"])
rel = abs(m[-1]["loss"] - ref) / ref if m else 1
if rel > 0.01: bad.append(f"final loss {m[-1]['loss']:.4f} vs {ref:.4f} uninterrupted")
starts = " -> ".join("dp %d" % s["dp"] for s in e if s["event"] == "start")
print("; ".join(bad) if bad else f"{starts}; steps lost {lost}; final loss {rel * 100:.2f}% from uninterrupted")
sys.exit(1 if bad else 0)
PY
}
# A host's link down at a random step (the leader's host too): the job goes
# on on the other two; with interval 1 a checkpoint write is in flight.
elastic_host_loss() {  # elastic_host_loss CASE TRIAL INTERVAL
  if ! elastic_up "$2"; then
    notes[$1]="skipped: needs root, network namespaces and etcd"; echo "$1 trial $2: skipped (${notes[$1]})"
    return
  fi
  local run=$work/$1_$2 steps=1200 after=$((50 + RANDOM % 300)) host=st-h$((RANDOM % 3)) out
  elastic_launch "$run" $steps "$3"
  if st_wait_records "$run" "$after"; then
    link $host down
    wait_events "$run" done 1 180
    link $host up
  fi
  elastic_down
  if out=$(elastic_verdict "$run" $steps "$3" 1); then
    record "$1" "$2" ok "$host's link down at step ~$after (checkpoint every $3): $out"
  else
    record "$1" "$2" FAIL "$host's link down at step ~$after: $out"
  fi
}
case_elastic_host_loss() { elastic_host_loss elastic_host_loss "$1" 50; }
case_elastic_mid_save() { elastic_host_loss elastic_mid_save "$1" 1; }

# A second host lost while the job restarts after the first: it ends on one.
case_elastic_second_failure() {
  if ! elastic_up "$1"; then
    notes[elastic_second_failure]="skipped: needs root, network namespaces and etcd"
    echo "elastic_second_failure trial $1: skipped (${notes[elastic_second_failure]})"
    return
  fi
  local run=$work/second_$1 steps=1200 after=$((50 + RANDOM % 300)) a=$((RANDOM % 3)) out
  local b=$(((a + 1 + RANDOM % 2) % 3))
  elastic_launch "$run" $steps 50
  if st_wait_records "$run" "$after"; then
    link st-h$a down
    wait_events "$run" start 2 60
    sleep "0.$((RANDOM % 10))"
    link st-h$b down
    wait_events "$run" done 1 180
    link st-h$a up
    link st-h$b up
  fi
  elastic_down
  if out=$(elastic_verdict "$run" $steps 50 2); then
    record elastic_second_failure "$1" ok "st-h$a's link down at step ~$after, st-h$b's as the job restarted: $out"
  else
    record elastic_second_failure "$1" FAIL "st-h$a then st-h$b down from step ~$after: $out"
  fi
}

# A host lost, back while the job runs on two, taken at the next restart
# (a rank killed): the job ends on three again.
case_elastic_host_returns() {
  if ! elastic_up "$1"; then
    notes[elastic_host_returns]="skipped: needs root, network namespaces and etcd"
    echo "elastic_host_returns trial $1: skipped (${notes[elastic_host_returns]})"
    return
  fi
  local run=$work/returns_$1 steps=1500 after=$((50 + RANDOM % 200)) host=st-h$((RANDOM % 3)) out n
  elastic_launch "$run" $steps 50
  if st_wait_records "$run" "$after"; then
    link $host down
    wait_events "$run" start 2 60
    link $host up
    st_wait_etcd_host "$host"
    n=$(lines "$run")
    st_wait_records "$run" $((n + 50 + RANDOM % 100)) || true
    # A rank of the newest job: after a leader's host was lost, the old job's
    # ranks may linger (each ends at its watchdog) and carry the same ranks.
    kill -9 "$(pgrep -n -f "scaletrain train.*$run")" 2>/dev/null
    wait_events "$run" done 1 180
  fi
  elastic_down
  local last
  last=$(grep '"event":"start"' "$run/events.jsonl" | tail -1 | grep -o '"dp":[0-9]*')
  if out=$(elastic_verdict "$run" $steps 50 2) && [ "$last" = '"dp":3' ]; then
    record elastic_host_returns "$1" ok "$host lost at step ~$after, back, taken at the next restart: $out"
  else
    record elastic_host_returns "$1" FAIL "$host lost at step ~$after and back: last start $last; $out"
  fi
}

IFS=, read -r -a selected <<<"$cases"
for c in "${selected[@]}"; do
  for t in $(seq 1 "$trials"); do "case_$c" "$t"; done
done

echo
echo "| case | trials | ok | failed | note |"
echo "|---|---:|---:|---:|---|"
failed=0
for c in "${selected[@]}"; do
  o=${ok_count[$c]:-0} f=${fail_count[$c]:-0}
  failed=$((failed + f))
  echo "| $c | $((o + f)) | $o | $f | ${notes[$c]:-} |"
done
[ $failed -eq 0 ]

#!/usr/bin/env bash
# A real one-node Slurm cluster in a directory, for tests and for trying
# scripts/slurm/train.sbatch on one machine: munged, slurmctld and slurmd
# from Debian's packages (apt-get install slurm-wlm munge), every file (key,
# sockets, config, spool, logs) under DIR, nothing written to /etc or /run.
#
#   scripts/slurm/local-cluster.sh up DIR      starts the daemons; prints
#                                              `export SLURM_CONF=DIR/slurm.conf`
#   scripts/slurm/local-cluster.sh down DIR    stops them (also after a crash)
#
# Needs root (slurmd runs jobs as their user; munged and the daemons here run
# as root). Ports 16817/16818 on this host.
set -u
cmd=${1:-}
dir=${2:-}
if [ -z "$cmd" ] || [ -z "$dir" ]; then
  echo "usage: $0 up|down DIR" >&2
  exit 2
fi

stop_pid_file() {
  local f=$1
  [ -f "$f" ] || return 0
  local pid
  pid=$(cat "$f" 2>/dev/null)
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
    kill "$pid" 2>/dev/null
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null
  fi
  rm -f "$f"
}

case $cmd in
  up)
    for b in munged slurmctld slurmd sbatch; do
      command -v "$b" >/dev/null || [ -x "/usr/sbin/$b" ] || { echo "error: $b not found; install it: apt-get install slurm-wlm munge" >&2; exit 1; }
    done
    [ "$(id -u)" -eq 0 ] || { echo "error: the local Slurm cluster needs root" >&2; exit 1; }
    dir=$(mkdir -p "$dir" && cd "$dir" && pwd)
    chmod 755 "$dir"
    mkdir -p "$dir/spool/ctld" "$dir/spool/d"
    if [ ! -f "$dir/munge.key" ]; then
      dd if=/dev/urandom bs=1 count=1024 of="$dir/munge.key" 2>/dev/null
      chmod 400 "$dir/munge.key"
    fi
    cpus=$(nproc)
    cat >"$dir/slurm.conf" <<CONF
ClusterName=scaletrain-local
SlurmctldHost=localhost
SlurmctldPort=16817
SlurmdPort=16818
AuthType=auth/munge
AuthInfo=socket=$dir/munge.sock
CredType=cred/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmdSpoolDir=$dir/spool/d
StateSaveLocation=$dir/spool/ctld
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
SlurmUser=root
ReturnToService=2
MpiDefault=none
KillWait=30
JobRequeue=1
NodeName=localhost CPUs=$cpus RealMemory=2000 State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
CONF
    /usr/sbin/munged -f --key-file="$dir/munge.key" --socket="$dir/munge.sock" --pid-file="$dir/munged.pid" \
      --log-file="$dir/munged.log" --seed-file="$dir/munged.seed" || { echo "error: munged did not start (see $dir/munged.log)" >&2; exit 1; }
    /usr/sbin/slurmctld -f "$dir/slurm.conf" || { echo "error: slurmctld did not start (see $dir/slurmctld.log)" >&2; "$0" down "$dir"; exit 1; }
    /usr/sbin/slurmd -f "$dir/slurm.conf" -N localhost || { echo "error: slurmd did not start (see $dir/slurmd.log)" >&2; "$0" down "$dir"; exit 1; }
    export SLURM_CONF="$dir/slurm.conf"
    for _ in $(seq 1 100); do
      sinfo -h -o %t 2>/dev/null | grep -q idle && { echo "export SLURM_CONF=$dir/slurm.conf"; exit 0; }
      sleep 0.2
    done
    echo "error: the Slurm node did not come up within 20 s (see $dir/slurmctld.log, $dir/slurmd.log)" >&2
    "$0" down "$dir"
    exit 1
    ;;
  down)
    [ -d "$dir" ] || exit 0
    if [ -f "$dir/slurm.conf" ]; then
      SLURM_CONF="$dir/slurm.conf" scancel --full --quiet -u root 2>/dev/null || true
    fi
    stop_pid_file "$dir/slurmd.pid"
    stop_pid_file "$dir/slurmctld.pid"
    stop_pid_file "$dir/munged.pid"
    exit 0
    ;;
  *)
    echo "usage: $0 up|down DIR" >&2
    exit 2
    ;;
esac

#!/usr/bin/env bash
# The gradient all-reduce by itself: bench/allreduce_busbw.cpp on 2 MPI ranks
# (scaletrain's bucketed Communicator::IAllreduce, as DataParallel issues it,
# against one plain MPI_Allreduce of the same total size; bus bandwidth and
# ratio, also paired rep by rep). Goal: ratio >= 0.9. The comm thread's
# polling is set by SCALETRAIN_COMM_SPIN_US / SCALETRAIN_COMM_POLL_US
# (src/comm/mpi_communicator.h); to compare settings pass them on with
# --mpirun-args "-x SCALETRAIN_COMM_SPIN_US". Builds the program if needed, prints the machine.
# A benchmark, not a test. Results are in docs/benchmarks.md ("Data
# parallelism (issue 3)").
#
# Usage: bench/dp_allreduce_busbw.sh [--build-dir DIR] [--mpirun-args "ARGS"] [--same-session] [-- PROGRAM-ARGS]
#   --build-dir DIR     build tree (configured Release if new; default build)
#   --mpirun-args ARGS  extra mpirun options (default none)
#   PROGRAM-ARGS        passed on: --sizes-mib 4,16,64 --bucket-mb 25 --reps 20 --warmup 3
#   --same-session      start the ranks in mpirun's session (see Sessions below)
#
# Sessions: Linux's autogroup scheduling (enabled here: /proc/sys/kernel/sched_autogroup_enabled)
# gives each session an equal share of the CPU, so on a machine where other
# sessions are busy the 2 ranks of one mpirun would share about one session's
# share between them, while a single process gets it alone. Each rank is
# therefore started in its own session (setsid); --same-session turns that off. On an otherwise idle machine it changes nothing.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
cd "$root"

build_dir=build
mpirun_args=""
setsid_ranks=1
while [ $# -gt 0 ]; do
  case "$1" in
    --build-dir) build_dir="$2"; shift 2 ;;
    --mpirun-args) mpirun_args="$2"; shift 2 ;;
    --same-session) setsid_ranks=0; shift ;;
    --) shift; break ;;
    -h|--help) awk 'NR > 1 && /^set -e/ { exit } NR > 1' "$0"; exit 0 ;;
    *) echo "error: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
source "$here/lib.sh"
st_require_mpirun

[ -f "$build_dir/CMakeCache.txt" ] || cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$build_dir" --target allreduce_busbw -j"$(nproc)" >/dev/null

cpu="$(lscpu | sed -n 's/^Model name: *//p' | head -1)"
echo "machine: ${cpu:-unknown CPU}, $(nproc) cores visible; $(mpirun --version 2>/dev/null | head -1);" \
     "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
launch=()
[ "$setsid_ranks" = 0 ] || launch=(setsid -w)
# shellcheck disable=SC2086
mpirun -np 2 $mpirun_args "${launch[@]}" "$build_dir/bench/allreduce_busbw" "$@"
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"

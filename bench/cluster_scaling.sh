#!/usr/bin/env bash
# The planner against measured scaling across emulated hosts (issue 17): DP,
# TP (inside a host), PP and a 3-D layout at 1, 2 and 4 hosts over link rates
# (unlimited, 1 Gbit/s, 100 Mbit/s), each run predicted by `scaletrain plan`
# from a `scaletrain bench` profile of that very cluster. Needs root (network
# namespaces). Method and results: docs/scaling.md.
#   bench/cluster_scaling.sh [--quick] --json OUT [--build DIR] [--families dp,pp] [--rates 1000,100] [--hosts 1,2,4]
#                            [--delays 0,1]
# --delays: one-way ms added between hosts (0: the kernel's links; N: vde2's wirefilter); full run 0,1.
# --latency [--delays 0,1,2,5]: instead, DP, PP and TP across 2 hosts at each delay, measured and
#   predicted, and 0.2 ms predicted (docs/scaling.md, "Latency"); bench/latency_plot.py draws it.
# --quick: DP, PP and 3-D at 1 Gbit/s and 100 Mbit/s, fewer steps (under 10 minutes on 2 cores).
# --compression STEPS --rates 100: instead, DP over 2 hosts with each parallel.dp_compress method.
# --barely --rates 100: instead, DP at a fixed batch over 1, 2, 4 hosts and what recovers it (docs/scaling.md).
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
build=build-bench
args=()
json=""
while [ $# -gt 0 ]; do
  case $1 in
    --build) build=$2; shift 2 ;;
    --json) json=$2; args+=(--json "$(realpath -m "$2")"); shift 2 ;;
    --quick) args+=(--quick); shift ;;
    --families|--rates|--hosts|--compression|--delays) args+=("$1" "$2"); shift 2 ;;
    --barely|--latency) args+=("$1"); shift ;;
    *) echo "error: unknown argument '$1'; usage: bench/cluster_scaling.sh [--quick] --json OUT" >&2; exit 2 ;;
  esac
done
[ -n "$json" ] || { echo "error: --json OUT is required (where the rows and the MAPE go)" >&2; exit 2; }
[ "$(id -u)" -eq 0 ] || { echo "error: the emulated cluster needs root (network namespaces); run as root" >&2; exit 1; }
command -v ip >/dev/null || { echo "error: ip not found; apt-get install iproute2" >&2; exit 1; }
st_require_mpirun
st_build_and_data "$build"
work=$(mktemp -d)
trap 'ST_CLUSTER_DIR="$work/cluster" scripts/cluster.sh down >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
python3 bench/cluster_scaling.py --build "$(realpath "$build")" --work "$work" "${args[@]}"

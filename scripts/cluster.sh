#!/usr/bin/env bash
# An emulated cluster on one machine: N hosts as network namespaces on a
# bridge, one veth each, an optional `tc tbf` rate limit per host link, a
# hostfile and a launcher agent for mpirun (see docs/training.md, "Across
# hosts"; the recipe is ../shared/recipes/netns-cluster.md).
#
#   scripts/cluster.sh up N [--rate RATE] [--slots K] [--dir DIR]   # RATE as tc takes it: 100mbit, 1gbit
#   scripts/cluster.sh down [--dir DIR]
#   scripts/cluster.sh status
#
# Hosts are named st-h0 .. st-h(N-1) at 10.200.0.1 .. 10.200.0.N on bridge
# st-br0 (10.200.0.254); /etc/hosts gets one line per host, marked
# "# scaletrain-cluster". DIR (default /tmp/scaletrain-cluster) gets:
#   hostfile     "st-hI slots=K" per host (K ranks per host; default 1)
#   nsexec.sh    the launcher's agent (mpirun --mca plm_rsh_agent DIR/nsexec.sh):
#                runs a command inside the namespace named like the host
#   mpirun.args  the mpirun options for this cluster, one per line
# `up` run twice gives the same cluster (it first takes down what is there);
# `down` removes every namespace, veth, qdisc, the bridge and the /etc/hosts
# lines, also after a crashed run. Needs root and iproute2.
set -euo pipefail

prefix=st-h
bridge=st-br0
subnet=10.200.0
marker="# scaletrain-cluster"
dir=${ST_CLUSTER_DIR:-/tmp/scaletrain-cluster}

die() { echo "error: $*" >&2; exit 1; }

need_root() {
  [ "$(id -u)" -eq 0 ] || die "the emulated cluster needs root (network namespaces, a bridge, tc); run as root"
  command -v ip >/dev/null || die "ip not found; install iproute2 (apt-get install iproute2)"
}

# Everything this script may have made, whatever state it is in.
down() {
  local ns
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^$prefix[0-9]*$" || true); do
    ip netns pids "$ns" 2>/dev/null | xargs -r kill -9 2>/dev/null || true
    ip netns delete "$ns"
  done
  # Host-side veths go with their peers; any left over (a crash between the two steps):
  for link in $(ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | cut -d@ -f1 | grep "^v$prefix[0-9]*$" || true); do
    ip link delete "$link" 2>/dev/null || true
  done
  ip link show "$bridge" >/dev/null 2>&1 && ip link delete "$bridge"
  if grep -q "$marker" /etc/hosts; then
    # /etc/hosts may be a bind mount (containers): rewrite it in place.
    local kept
    kept=$(grep -v "$marker" /etc/hosts)
    printf '%s\n' "$kept" >/etc/hosts
  fi
  rm -rf "$dir"
}

up() {
  local n=$1 rate=$2 slots=$3
  [[ "$n" =~ ^[0-9]+$ ]] && [ "$n" -ge 1 ] && [ "$n" -le 200 ] || die "up N: N must be 1 to 200, got '$n'"
  [[ "$slots" =~ ^[0-9]+$ ]] && [ "$slots" -ge 1 ] || die "--slots must be a positive number, got '$slots'"
  if [ -n "$rate" ] && ! [[ "$rate" =~ ^[0-9.]+(bit|kbit|mbit|gbit)$ ]]; then
    die "--rate '$rate' is not a rate tc understands; use e.g. 100mbit or 1gbit"
  fi
  down
  ip link add "$bridge" type bridge
  ip addr add "$subnet.254/24" dev "$bridge"
  ip link set "$bridge" up
  mkdir -p "$dir"
  : >"$dir/hostfile"
  local i host
  for i in $(seq 0 $((n - 1))); do
    host=$prefix$i
    ip netns add "$host"
    ip link add "v$host" type veth peer name eth0 netns "$host"
    ip link set "v$host" master "$bridge" up
    ip -n "$host" addr add "$subnet.$((i + 1))/24" dev eth0
    ip -n "$host" link set eth0 up
    ip -n "$host" link set lo up
    if [ -n "$rate" ]; then
      ip netns exec "$host" tc qdisc add dev eth0 root tbf rate "$rate" burst 32kbit latency 400ms
    fi
    echo "$subnet.$((i + 1)) $host $marker" >>/etc/hosts
    echo "$host slots=$slots" >>"$dir/hostfile"
  done
  cat >"$dir/nsexec.sh" <<'SH'
#!/bin/sh
# mpirun's launcher agent for the emulated cluster: "ssh HOST CMD" becomes
# "run CMD inside the network namespace HOST", with HOST as its host name (a
# UTS namespace of its own): the ranks report their host, and OpenMPI's
# per-host session directories do not collide.
host=$1
shift
exec ip netns exec "$host" unshare --uts /bin/sh -c "hostname $host && $*"
SH
  chmod +x "$dir/nsexec.sh"
  # --bind-to none: mpirun sees each namespace as a node and would pin every
  # host's first rank to core 0. --mca routed direct: launches fail now and
  # then without it. TCP only, on the cluster's subnet.
  cat >"$dir/mpirun.args" <<EOF
--hostfile
$dir/hostfile
--bind-to
none
--mca
routed
direct
--mca
plm_rsh_agent
$dir/nsexec.sh
--mca
btl
tcp,self
--mca
btl_tcp_if_include
$subnet.0/24
--mca
oob_tcp_if_include
$subnet.0/24
EOF
  echo "cluster up: $n host(s) (${prefix}0..$prefix$((n - 1))) on $bridge${rate:+, $rate per host link}; hostfile $dir/hostfile"
  echo "run: mpirun \$(cat $dir/mpirun.args) -np $((n * slots)) ..."
}

status() {
  ip netns list | grep "^$prefix" || echo "no emulated hosts"
  local ns
  for ns in $(ip netns list | awk '{print $1}' | grep "^$prefix" || true); do
    echo "$ns: $(ip -n "$ns" -o -4 addr show eth0 | awk '{print $4}') $(ip netns exec "$ns" tc qdisc show dev eth0 | head -1)"
  done
}

cmd=${1:-}
[ $# -gt 0 ] && shift
n=""
rate=""
slots=1
while [ $# -gt 0 ]; do
  case $1 in
    --rate) rate=${2:-}; shift 2 ;;
    --slots) slots=${2:-}; shift 2 ;;
    --dir) dir=${2:-}; shift 2 ;;
    *) [ -z "$n" ] && [ "$cmd" = up ] && n=$1 && shift && continue; die "unknown argument '$1'" ;;
  esac
done
case $cmd in
  up) need_root; up "${n:-}" "$rate" "$slots" ;;
  down) need_root; down; echo "cluster down" ;;
  status) need_root; status ;;
  *) echo "usage: scripts/cluster.sh up N [--rate RATE] [--slots K] [--dir DIR] | down [--dir DIR] | status" >&2; exit 2 ;;
esac

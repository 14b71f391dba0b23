#!/usr/bin/env bash
# An emulated cluster on one machine: N hosts as network namespaces on a
# bridge, one veth each, an optional `tc tbf` rate limit per host link, a
# fixed amount of CPU per host (a cgroup with a CPU quota), a hostfile and a
# launcher agent for mpirun (see docs/scaling.md, "The emulated cluster"; the
# recipe is ../shared/recipes/netns-cluster.md).
#
#   scripts/cluster.sh up N [--rate RATE] [--slots K] [--cpus C] [--delay MS [--jitter MS]]
#                           [--loss PCT] [--force] [--dir DIR]
#   scripts/cluster.sh link HOST down|up     # a host's link fails, or comes back
#   scripts/cluster.sh down [--dir DIR]
#   scripts/cluster.sh status
#
#   --rate RATE  each host's link rate as tc takes it (100mbit, 1gbit); default unlimited
#   --slots K    ranks per host in the hostfile (default 1)
#   --cpus C     CPU cores each host may use (a decimal; default: this machine's cores / N;
#                "none": no quota). A host's processes share C cores however idle the
#                other hosts are, as on real hosts: cgroup v2 cpu.max, or v1
#                cpu.cfs_quota_us, whichever the machine mounts.
#   --delay MS   one-way delay added between any two hosts (whole milliseconds: vde2's
#   --jitter MS  wirefilter delays in steps of 1 ms), with a uniform variation of +-MS;
#   --loss PCT   that share of the packets between two hosts lost. Any of the three makes
#                the links VDE's (vde2): each host's interface a tap on a vde_switch of
#                its own, joined to the cluster's switch by a `wirefilter` that delays
#                and drops packets (this kernel has no netem). The VDE path itself adds
#                about 0.1 ms one way (docs/scaling.md); --delay 0 gives that path with
#                no added delay.
#   --force      replace emulated hosts that already exist (an earlier `up`, a crashed
#                run); without it `up` refuses and names them
#
# Hosts are named st-h0 .. st-h(N-1) at 10.200.0.1 .. 10.200.0.N on bridge
# st-br0 (10.200.0.254; with VDE links, the cluster switch's tap of that name);
# /etc/hosts gets one line per host, marked
# "# scaletrain-cluster". DIR (default /tmp/scaletrain-cluster) gets:
#   hostfile     "st-hI slots=K" per host (K ranks per host; default 1)
#   nsexec.sh    the launcher's agent (mpirun --mca plm_rsh_agent DIR/nsexec.sh):
#                runs a command inside the namespace named like the host, in the
#                host's CPU cgroup
#   mpirun.args  the mpirun options for this cluster, one per line
# `down` removes every namespace, veth, qdisc, cgroup, VDE process, the bridge
# and the /etc/hosts lines, also after a crashed run. Needs root and iproute2
# (and vde2 for --delay, --jitter, --loss).
set -euo pipefail

prefix=st-h
bridge=st-br0
subnet=10.200.0
marker="# scaletrain-cluster"
dir=${ST_CLUSTER_DIR:-/tmp/scaletrain-cluster}
cgroup_name=scaletrain-cluster
# A quota is enforced once per period: 2 ms keeps a host's share even over
# the milliseconds between two collectives (at 10 ms the pipeline rows of
# bench/cluster_scaling.sh were 11-20% slower than predicted, at 2 ms within
# 13%, docs/scaling.md; the kernel's default 100 ms would let a half-core
# host run flat out for 50 ms and then stall for 50).
cpu_period_us=2000

die() { echo "error: $*" >&2; exit 1; }

need_root() {
  [ "$(id -u)" -eq 0 ] || die "the emulated cluster needs root (network namespaces, a bridge, tc); run as root"
  command -v ip >/dev/null || die "ip not found; install iproute2 (apt-get install iproute2)"
}

# The cgroup hierarchy that has the CPU controller: "v2 PATH" (the unified
# hierarchy lists cpu among its controllers) or "v1 PATH" (the cpu
# controller's own mount); empty if neither.
cgroup_cpu() {
  if [ -f /sys/fs/cgroup/cgroup.controllers ] && grep -qw cpu /sys/fs/cgroup/cgroup.controllers; then
    echo "v2 /sys/fs/cgroup"
    return
  fi
  local mnt
  mnt=$(awk '$3 == "cgroup" && $4 ~ /(^|,)cpu(,|$)/ {print $2; exit}' /proc/mounts)
  [ -n "$mnt" ] && [ -f "$mnt/cpu.cfs_quota_us" ] && echo "v1 $mnt"
  return 0
}

# Makes host HOST's cgroup with a quota of CORES cores; prints its path.
make_cgroup() {
  local host=$1 cores=$2 kind base parent quota
  read -r kind base <<<"$(cgroup_cpu)"
  parent=$base/$cgroup_name
  quota=$(awk -v c="$cores" -v p="$cpu_period_us" 'BEGIN {printf "%d", c * p}')
  mkdir -p "$parent/$host"
  if [ "$kind" = v2 ]; then
    grep -qw cpu "$base/cgroup.subtree_control" || echo +cpu >"$base/cgroup.subtree_control"
    grep -qw cpu "$parent/cgroup.subtree_control" || echo +cpu >"$parent/cgroup.subtree_control"
    echo "$quota $cpu_period_us" >"$parent/$host/cpu.max"
  else
    echo "$cpu_period_us" >"$parent/$host/cpu.cfs_period_us"
    echo "$quota" >"$parent/$host/cpu.cfs_quota_us"
  fi
  echo "$parent/$host"
}

# Removes the hosts' cgroups (their processes must have ended).
remove_cgroups() {
  local kind base cg
  read -r kind base <<<"$(cgroup_cpu)"
  [ -n "$base" ] && [ -d "$base/$cgroup_name" ] || return 0
  for cg in "$base/$cgroup_name"/$prefix*; do
    [ -d "$cg" ] || continue
    # A process killed a moment ago may still be leaving its cgroup.
    for _ in $(seq 1 50); do rmdir "$cg" 2>/dev/null && break; sleep 0.1; done
  done
  rmdir "$base/$cgroup_name" 2>/dev/null || true
}

existing_hosts() { ip netns list 2>/dev/null | awk '{print $1}' | grep "^$prefix[0-9]*$" || true; }

# The VDE processes of an emulated cluster, whatever --dir it was made with:
# the switches (the hosts' run in their namespaces, which down kills with
# them) and the wirefilters.
kill_vde() {
  local pattern="(wirefilter -v .*/vde/$prefix[0-9]+\.ctl:|vde_switch -s .*/vde/(core|$prefix[0-9]+)\.ctl)"
  pkill -f "$pattern" 2>/dev/null || true
  # A switch's tap goes when the switch has exited: wait, so that a new one
  # can take the name.
  for _ in $(seq 1 50); do pgrep -f "$pattern" >/dev/null || return 0; sleep 0.1; done
  pkill -9 -f "$pattern" 2>/dev/null || true
}

# Waits (up to 5 s) for network device DEV to appear (a VDE switch's tap).
wait_for_device() {
  for _ in $(seq 1 50); do ip link show "$1" >/dev/null 2>&1 && return 0; sleep 0.1; done
  die "the VDE switch did not create its interface $1 (see the vde_switch messages above)"
}

# Everything this script may have made, whatever state it is in.
down() {
  kill_vde
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
  mountpoint -q "$dir/cgroupfs" 2>/dev/null && umount "$dir/cgroupfs"
  remove_cgroups
  rm -rf "$dir"
}

# The cores per host `--cpus` asks for ("" : the machine's cores / N).
host_cpus() {
  local n=$1 cpus=$2
  if [ -z "$cpus" ]; then
    awk -v c="$(nproc)" -v n="$n" 'BEGIN {printf "%.4g", c / n}'
  else
    echo "$cpus"
  fi
}

# Checks up's arguments; prints the cores per host (or none).
check_up() {
  local n=$1
  [[ "$n" =~ ^[0-9]+$ ]] && [ "$n" -ge 1 ] && [ "$n" -le 200 ] || die "up N: N must be 1 to 200, got '$n'"
  [[ "$slots" =~ ^[0-9]+$ ]] && [ "$slots" -ge 1 ] || die "--slots must be a positive number, got '$slots'"
  if [ -n "$rate" ] && ! [[ "$rate" =~ ^[0-9.]+(bit|kbit|mbit|gbit)$ ]]; then
    die "--rate '$rate' is not a rate tc understands; use e.g. 100mbit or 1gbit"
  fi
  local name value
  for name in delay jitter; do
    value=${!name}
    [ -z "$value" ] || [[ "$value" =~ ^[0-9]+$ ]] ||
      die "--$name must be a whole number of milliseconds (vde2's wirefilter delays in steps of 1 ms), got '$value'"
  done
  [ -z "$loss" ] || [[ "$loss" =~ ^[0-9]*\.?[0-9]+$ ]] || die "--loss must be a percentage (e.g. 1 or 0.5), got '$loss'"
  [ -z "$jitter" ] || [ -n "$delay" ] || die "--jitter varies the delay: give --delay MS with it"
  [ -z "$loss" ] || awk -v l="$loss" 'BEGIN {exit !(l < 100)}' || die "--loss must be below 100 (percent), got '$loss'"
  if [ -n "$delay$loss" ] && ! command -v wirefilter >/dev/null; then
    die "--delay, --jitter and --loss need vde2's wirefilter; apt-get install vde2"
  fi
  local c
  c=$(host_cpus "$n" "$cpus")
  if [ -z "$cpus" ] && [ -z "$(cgroup_cpu)" ]; then
    # Asked for nothing: hosts without quotas, said once.
    echo "warning: this machine mounts no cgroup with the cpu controller: the hosts share its cores without quotas" >&2
    c=none
  fi
  if [ "$c" != none ]; then
    [[ "$c" =~ ^[0-9]*\.?[0-9]+$ ]] && awk -v c="$c" 'BEGIN {exit !(c >= 0.01)}' ||
      die "--cpus must be a number of cores of at least 0.01 (e.g. 0.5), or none; got '$c'"
    [ -n "$(cgroup_cpu)" ] ||
      die "this machine mounts no cgroup with the cpu controller, so hosts cannot get a fixed CPU share; pass --cpus none to run without quotas"
  fi
  local old
  old=$(existing_hosts | tr '\n' ' ')
  if [ -n "$old" ] && [ "$force" != 1 ]; then
    die "emulated hosts already exist: ${old% } (an earlier 'up', or a run that did not finish); take them down with 'scripts/cluster.sh down', or pass --force to replace them"
  fi
  echo "$c"
}

# A veth pair from host HOST's eth0 to the kernel bridge.
veth_link() {
  local host=$1
  ip link add "v$host" type veth peer name eth0 netns "$host"
  ip link set "v$host" master "$bridge" up
}

# The wirefilter options for one host's link. A packet between two hosts
# crosses the sender's wirefilter outward (left to right: from the host's
# switch to the cluster's) and the receiver's inward, so the delay, jitter
# and loss apply outward only: once per packet. wirefilter delays in whole
# milliseconds (a fraction is dropped), hence whole numbers only.
wirefilter_args() {
  [ -z "$delay" ] || echo "-d LR${delay}${jitter:++$jitter}U"
  [ -z "$loss" ] || echo "-l LR$loss"
}

# Host HOST's eth0 as a tap on a vde_switch in its namespace, joined to the
# cluster switch by a wirefilter.
vde_link() {
  local host=$1
  ip netns exec "$host" vde_switch -s "$dir/vde/$host.ctl" -t eth0 -d -p "$dir/vde/$host.pid"
  for _ in $(seq 1 50); do ip -n "$host" link show eth0 >/dev/null 2>&1 && break; sleep 0.1; done
  # shellcheck disable=SC2046
  wirefilter -v "$dir/vde/$host.ctl:$dir/vde/core.ctl" $(wirefilter_args) --daemon \
    --pidfile "$dir/vde/wf-$host.pid" -M "$dir/vde/wf-$host.mgmt"
}

# The cluster's switch: a kernel bridge, or with VDE links a vde_switch whose
# tap (named like the bridge) gives this namespace, where mpirun runs, its
# address on the subnet.
make_switch() {
  local n=$1
  if [ "$links" = vde ]; then
    mkdir -p "$dir/vde"
    vde_switch -s "$dir/vde/core.ctl" -t "$bridge" -n $((n + 8)) -d -p "$dir/vde/core.pid"
    wait_for_device "$bridge"
  else
    ip link add "$bridge" type bridge
  fi
  ip addr add "$subnet.254/24" dev "$bridge"
  ip link set "$bridge" up
}

add_host() {
  local i=$1 host=$prefix$1
  [ "$cpus" = none ] || echo "$host $(make_cgroup "$host" "$cpus")" >>"$dir/cgroups"
  ip netns add "$host"
  if [ "$links" = vde ]; then vde_link "$host"; else veth_link "$host"; fi
  ip -n "$host" addr add "$subnet.$((i + 1))/24" dev eth0
  ip -n "$host" link set eth0 up
  ip -n "$host" link set lo up
  if [ -n "$rate" ]; then
    ip netns exec "$host" tc qdisc add dev eth0 root tbf rate "$rate" burst 32kbit latency 400ms
  fi
  echo "$subnet.$((i + 1)) $host $marker" >>/etc/hosts
  echo "$host slots=$slots" >>"$dir/hostfile"
}

write_agent() {
  local kind base
  read -r kind base <<<"$(cgroup_cpu)"
  if [ -s "$dir/cgroups" ] && [ -d "$base/$cgroup_name" ]; then
    # The hosts' cgroups where a process inside a host can reach them (ip
    # netns exec mounts a /sys of its own, without cgroups).
    mkdir -p "$dir/cgroupfs"
    mount --bind "$base/$cgroup_name" "$dir/cgroupfs"
  fi
  cat >"$dir/nsexec.sh" <<SH
#!/bin/sh
# mpirun's launcher agent for the emulated cluster: "ssh HOST CMD" becomes
# "run CMD inside the network namespace HOST", with HOST as its host name (a
# UTS namespace of its own): the ranks report their host, and OpenMPI's
# per-host session directories do not collide. It first joins HOST's CPU
# cgroup (listed in cgroups), which every process it starts inherits.
host=\$1
shift
cg=\$(awk -v h="\$host" '\$1 == h {print \$2}' "$dir/cgroups")
# Run from inside a host (an elastic launcher there starts mpirun), /sys is
# that namespace's own mount, without the cgroups: reach them through the
# bind mount DIR/cgroupfs, which every namespace sees.
[ -z "\$cg" ] || [ -d "\$cg" ] || cg=$dir/cgroupfs/\$host
[ -z "\$cg" ] || echo \$\$ >"\$cg/cgroup.procs"
exec ip netns exec "\$host" unshare --uts /bin/sh -c "hostname \$host && \$*"
SH
  chmod +x "$dir/nsexec.sh"
  # --bind-to none: mpirun sees each namespace as a node and would pin every
  # host's first rank to core 0. --mca routed direct: launches fail now and
  # then without it. TCP only, on the cluster's subnet. Keepalives on
  # mpirun's own connections (after 5 s idle, 3 missed 2 s apart): a host
  # whose link stays down is declared lost 6-11 s after it went, and the job
  # ends naming it, instead of mpirun waiting for the link to return (the
  # defaults, 300 s and 9 x 20 s, wait 8 minutes). A shorter outage passes.
  # A watchdog (parallel.comm_timeout_s) shorter than that lets a rank abort
  # first, and mpirun's abort then waits on the lost host's connection.
  printf '%s\n' --hostfile "$dir/hostfile" --bind-to none --mca routed direct --mca plm_rsh_agent "$dir/nsexec.sh" \
    --mca btl tcp,self --mca btl_tcp_if_include "$subnet.0/24" --mca oob_tcp_if_include "$subnet.0/24" \
    --mca oob_tcp_keepalive_time 5 --mca oob_tcp_keepalive_intvl 2 --mca oob_tcp_keepalive_probes 3 \
    >"$dir/mpirun.args"
}

up() {
  local n=$1
  cpus=$(check_up "$n") || exit 1
  links=veth
  [ -z "$delay$loss" ] || links=vde
  down
  mkdir -p "$dir"
  make_switch "$n"
  : >"$dir/hostfile"
  : >"$dir/cgroups"
  local i
  for i in $(seq 0 $((n - 1))); do add_host "$i"; done
  write_agent
  local share="$cpus cores per host" link_note=""
  [ "$cpus" = none ] && share="no CPU quota"
  [ "$links" = vde ] && link_note=", VDE links (${delay:+delay $delay ms}${jitter:+ +-$jitter ms}${loss:+ loss $loss%})"
  echo "cluster up: $n host(s) (${prefix}0..$prefix$((n - 1))) on $bridge${rate:+, $rate per host link}$link_note, $share; hostfile $dir/hostfile"
  echo "run: mpirun \$(cat $dir/mpirun.args) -np $((n * slots)) ..."
}

# A host's link fails (down) or comes back (up): its interface, whatever
# the links are made of.
link() {
  local host=$1 state=$2
  existing_hosts | grep -qx "$host" || die "no emulated host '$host'; hosts: $(existing_hosts | tr '\n' ' ')"
  [ "$state" = down ] || [ "$state" = up ] || die "link $host: say down or up, not '$state'"
  ip -n "$host" link set eth0 "$state"
  echo "link of $host $state"
}

status() {
  ip netns list | grep "^$prefix" || echo "no emulated hosts"
  local ns
  local kind base quota
  read -r kind base <<<"$(cgroup_cpu)"
  for ns in $(ip netns list | awk '{print $1}' | grep "^$prefix" || true); do
    quota="no CPU quota"
    if [ "$kind" = v2 ] && [ -f "$base/$cgroup_name/$ns/cpu.max" ]; then
      quota="cpu.max $(cat "$base/$cgroup_name/$ns/cpu.max")"
    elif [ "$kind" = v1 ] && [ -f "$base/$cgroup_name/$ns/cpu.cfs_quota_us" ]; then
      quota="cfs quota $(cat "$base/$cgroup_name/$ns/cpu.cfs_quota_us") us per $(cat "$base/$cgroup_name/$ns/cpu.cfs_period_us") us"
    fi
    echo "$ns: $(ip -n "$ns" -o -4 addr show eth0 | awk '{print $4}') $(ip netns exec "$ns" tc qdisc show dev eth0 | head -1); $quota"
  done
}

cmd=${1:-}
[ $# -gt 0 ] && shift
n=""
rate=""
slots=1
cpus=""
force=0
delay=""
jitter=""
loss=""
links=veth
if [ "$cmd" = link ]; then
  need_root
  link "${1:-}" "${2:-}"
  exit 0
fi
while [ $# -gt 0 ]; do
  case $1 in
    --delay) delay=${2:-}; shift 2 ;;
    --jitter) jitter=${2:-}; shift 2 ;;
    --loss) loss=${2:-}; shift 2 ;;
    --rate) rate=${2:-}; shift 2 ;;
    --slots) slots=${2:-}; shift 2 ;;
    --cpus) cpus=${2:-}; [ -n "$cpus" ] || die "--cpus needs a number of cores (e.g. 0.5) or none"; shift 2 ;;
    --force) force=1; shift ;;
    --dir) dir=${2:-}; shift 2 ;;
    *) [ -z "$n" ] && [ "$cmd" = up ] && n=$1 && shift && continue; die "unknown argument '$1'" ;;
  esac
done
case $cmd in
  up) need_root; up "${n:-}" ;;
  down) need_root; down; echo "cluster down" ;;
  status) need_root; status ;;
  *) echo "usage: scripts/cluster.sh up N [--rate RATE] [--slots K] [--cpus C|none] [--delay MS [--jitter MS]] [--loss PCT] [--force] [--dir DIR] | link HOST down|up | down [--dir DIR] | status" >&2; exit 2 ;;
esac

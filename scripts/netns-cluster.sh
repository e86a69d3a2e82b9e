#!/bin/bash
# A multi-host cluster on one machine: each "host" is a network namespace joined to a bridge by a veth link
# shaped with tc, and its ranks run under `unshare --ipc --pid --uts`, so UCX (and bagua) see separate hosts:
# shared memory within a host, TCP between hosts.
#
#   scripts/netns-cluster.sh up   --hosts H [--rate 1gbit] [--delay 1ms]
#   scripts/netns-cluster.sh run  --hosts H --ranks-per-host R [--rate 1gbit] [--delay 1ms] [--show-lanes] [--bind] -- prog args...
#   scripts/netns-cluster.sh run  --layout 3,1 [--interleave] ... -- prog args...   (uneven hosts; ranks dealt
#                                 round-robin over hosts with --interleave instead of host by host)
#   scripts/netns-cluster.sh down
#
# `run` brings a cluster up for the job and takes it down afterwards (unless one is already up). Ranks get
# BAGUA_RANK, BAGUA_WORLD_SIZE, BAGUA_LOCAL_RANK, BAGUA_LOCAL_SIZE, BAGUA_SECRET and BAGUA_ROOT_FILE; rank 0
# (in host 0) serves the rendezvous on a port it binds (port 0) and writes into that file. Exit 77 where
# namespaces or tc are not available. Names carry the PID of `up`; a trap removes everything. --bind pins rank r
# to the machine's (r mod cores)-th core (off by default; docs/testbed.md).
set -uo pipefail

STATE_DIR=${BAGUA_NETNS_STATE:-/run/bagua-netns}
SUBNET=10.99.0
usage() { sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }

probe() {
  [ "$(id -u)" = 0 ] || { echo "netns-cluster: needs root (namespaces, tc); skipping"; exit 77; }
  for tool in ip tc unshare; do
    command -v $tool >/dev/null || { echo "netns-cluster: '$tool' not found; skipping"; exit 77; }
  done
  local ns="bgprobe$$"
  if ! ip netns add "$ns" 2>/dev/null; then echo "netns-cluster: cannot create network namespaces; skipping"; exit 77; fi
  local ok=1
  ip -n "$ns" link add probe0 type veth peer name probe1 2>/dev/null && ip -n "$ns" link set probe0 up 2>/dev/null &&
    ip netns exec "$ns" tc qdisc add dev probe0 root tbf rate 1gbit burst 128kb latency 50ms 2>/dev/null || ok=0
  ip netns del "$ns" 2>/dev/null
  [ $ok = 1 ] || { echo "netns-cluster: tc shaping is not available; skipping"; exit 77; }
  unshare --ipc --pid --uts --fork true 2>/dev/null || { echo "netns-cluster: unshare is not permitted; skipping"; exit 77; }
}

# Shapes one end of a link: netem when a delay is asked for (it also takes a rate), tbf otherwise.
shape() {
  local ns=$1 dev=$2 rate=$3 delay=$4
  if command -v ethtool >/dev/null; then
    ip netns exec "$ns" ethtool -K "$dev" gso off tso off gro off >/dev/null 2>&1 || true
  fi
  [ -z "$rate" ] && [ -z "$delay" ] && return 0
  if [ -n "$delay" ]; then
    ip netns exec "$ns" tc qdisc add dev "$dev" root netem delay "$delay" ${rate:+rate $rate} limit 100000
  else
    ip netns exec "$ns" tc qdisc add dev "$dev" root tbf rate "$rate" burst 256kb latency 100ms
  fi
}

cluster_up() {
  local hosts=$1 rate=$2 delay=$3 prefix="bg$$"
  mkdir -p "$STATE_DIR"
  [ -s "$STATE_DIR/prefix" ] && { echo "netns-cluster: a cluster is already up ($(cat "$STATE_DIR/prefix")); run 'down' first"; return 1; }
  echo "$prefix" > "$STATE_DIR/prefix"
  echo "$hosts" > "$STATE_DIR/hosts"
  local br="${prefix}br"
  ip netns add "$br" || return 1
  ip -n "$br" link add br0 type bridge && ip -n "$br" link set br0 up && ip -n "$br" link set lo up || return 1
  for h in $(seq 0 $((hosts - 1))); do
    local ns="${prefix}h$h"
    ip netns add "$ns" || return 1
    ip link add "${prefix}a$h" type veth peer name "${prefix}b$h" || return 1
    ip link set "${prefix}a$h" netns "$ns" && ip -n "$ns" link set "${prefix}a$h" name eth0 || return 1
    ip link set "${prefix}b$h" netns "$br" && ip -n "$br" link set "${prefix}b$h" master br0 || return 1
    ip -n "$ns" addr add "$SUBNET.$((h + 1))/24" dev eth0 || return 1
    ip -n "$ns" link set eth0 up && ip -n "$ns" link set lo up && ip -n "$br" link set "${prefix}b$h" up || return 1
    # Both directions of every host link are shaped.
    shape "$ns" eth0 "$rate" "$delay" && shape "$br" "${prefix}b$h" "$rate" "$delay" || return 1
  done
  echo "netns-cluster: $hosts hosts up (${rate:-unshaped}${delay:+, delay $delay}), $SUBNET.1-$SUBNET.$hosts"
}

cluster_down() {
  [ -s "$STATE_DIR/prefix" ] || return 0
  local prefix
  prefix=$(cat "$STATE_DIR/prefix")
  for ns in $(ip netns list | awk '{print $1}' | grep "^${prefix}"); do
    ip netns pids "$ns" 2>/dev/null | xargs -r kill -9 2>/dev/null
    ip netns del "$ns" 2>/dev/null
  done
  rm -f "$STATE_DIR/prefix" "$STATE_DIR/hosts"
}

# Which transport each endpoint used, read from UCX's own endpoint dump in the bagua debug logs.
show_lanes() {
  local logdir=$1 layout=$2 interleave=$3
  python3 - "$logdir" "$(assign_ranks "$layout" "$interleave" | paste -sd'|')" <<'PY'
import glob, re, sys
logdir, hosts = sys.argv[1], [line.split() for line in sys.argv[2].split("|")]
host_of = {int(r): h for h, ranks in enumerate(hosts) for r in ranks}
seen = {}
for path in glob.glob(f"{logdir}/bagua.*.log"):
    rank, peer = None, None
    for line in open(path, errors="replace"):
        m = re.search(r"rank (\d+)\] bagua DEBUG: transport lanes", line)
        if m: rank = int(m.group(1)); continue
        m = re.match(r"# endpoint to rank (\d+)", line)
        if m: peer = int(m.group(1)); continue
        m = re.search(r"lane\[0\]:\s+\d+:(\S+)", line)
        if m and rank is not None and peer is not None:
            kind = "within a host" if host_of[rank] == host_of[peer] else "between hosts"
            seen.setdefault(kind, set()).add(re.sub(r"\.\d+$", "", m.group(1)))
            peer = None
print("netns-cluster: lanes: " + "; ".join(f"{k}: {', '.join(sorted(v))}" for k, v in sorted(seen.items())))
PY
}

# Global ranks of every host: host by host, or dealt round-robin (--interleave).
assign_ranks() {
  local layout=$1 interleave=$2
  python3 - "$layout" "$interleave" <<'PY'
import sys
sizes = [int(x) for x in sys.argv[1].split(",")]
hosts = [[] for _ in sizes]
if sys.argv[2] == "1":
    rank, h = 0, 0
    while rank < sum(sizes):
        if len(hosts[h]) < sizes[h]:
            hosts[h].append(rank); rank += 1
        h = (h + 1) % len(sizes)
else:
    rank = 0
    for h, n in enumerate(sizes):
        hosts[h] = list(range(rank, rank + n)); rank += n
for ranks in hosts:
    print(" ".join(map(str, ranks)))
PY
}

cluster_run() {
  local layout=$1 interleave=$2 lanes=$3 bind=$4
  shift 4
  local prefix world dir
  prefix=$(cat "$STATE_DIR/prefix")
  world=$(( ${layout//,/+} ))
  dir=$(mktemp -d /tmp/bagua-netns-run.XXXXXX)
  local secret
  secret=$(od -An -tx1 -N32 /dev/urandom | tr -d ' \n')
  # UCX must not pick loopback for peers in other namespaces.
  local extra_env=("UCX_NET_DEVICES=${UCX_NET_DEVICES:-eth0}")
  if [ "$lanes" = 1 ]; then extra_env+=(BAGUA_LOG_LEVEL=debug "BAGUA_LOG_FILE=$dir/bagua.%h.%p.log"); fi
  # For tests and tools: the host index of every rank, in rank order, and the subnet (host h is $SUBNET.<h+1>).
  local host_of
  host_of=$(assign_ranks "$layout" "$interleave" | awk '{for (i = 1; i <= NF; i++) print $i, NR - 1}' | sort -n | awk '{print $2}' | paste -sd' ')
  extra_env+=("BAGUA_TESTBED_HOSTS=$host_of" "BAGUA_TESTBED_SUBNET=$SUBNET")
  # --bind: rank r runs on the machine's (r mod cores)-th allowed core, as if each emulated host had cores of its
  # own: a rank that moves between cores sends through another core's veth backlog, and the peer sees reordering.
  local cpus=""
  if [ "$bind" = 1 ] && ! command -v taskset >/dev/null; then echo "netns-cluster: --bind needs taskset"; return 77; fi
  [ "$bind" = 1 ] && cpus=$(python3 -c 'import os; print(" ".join(map(str, sorted(os.sched_getaffinity(0)))))')
  local pids=() h=0
  while read -r ranks; do
    local ns="${prefix}h$h"
    # One IPC/PID/UTS namespace per host; all of the host's ranks live in it.
    ip netns exec "$ns" unshare --ipc --pid --uts --fork bash -c '
      hostname "$0"
      ranks=($1); world=$2
      local_size=${#ranks[@]}
      cpus=($3); shift 3
      for l in "${!ranks[@]}"; do
        pin=()
        [ ${#cpus[@]} -gt 0 ] && pin=(taskset -c "${cpus[$((ranks[$l] % ${#cpus[@]}))]}")
        BAGUA_RANK=${ranks[$l]} BAGUA_LOCAL_RANK=$l BAGUA_LOCAL_SIZE=$local_size BAGUA_WORLD_SIZE=$world "${pin[@]}" "$@" &
      done
      status=0
      for job in $(jobs -p); do wait $job || status=$?; done
      exit $status' "netns-host$h" "$ranks" "$world" "$cpus" \
      env BAGUA_SECRET="$secret" BAGUA_ROOT_FILE="$dir/root" "${extra_env[@]}" "$@" &
    pids+=($!)
    h=$((h + 1))
  done < <(assign_ranks "$layout" "$interleave")
  local status=0
  for p in "${pids[@]}"; do wait "$p" || status=$?; done
  [ "$lanes" = 1 ] && show_lanes "$dir" "$layout" "$interleave"
  rm -rf "$dir"
  return $status
}

cmd=${1:-}
[ -n "$cmd" ] || usage
shift
hosts=0 rph=1 rate="" delay="" lanes=0 layout="" interleave=0 bind=0
while [ $# -gt 0 ]; do
  case "$1" in
    --hosts) hosts=$2; shift 2 ;;
    --ranks-per-host) rph=$2; shift 2 ;;
    --rate) rate=$2; shift 2 ;;
    --delay) delay=$2; shift 2 ;;
    --show-lanes) lanes=1; shift ;;
    --bind) bind=1; shift ;;
    --layout) layout=$2; shift 2 ;;
    --interleave) interleave=1; shift ;;
    --) shift; break ;;
    *) usage ;;
  esac
done

case "$cmd" in
  up)
    [ "$hosts" -ge 1 ] || usage
    probe
    cluster_up "$hosts" "$rate" "$delay" || { cluster_down; exit 1; } ;;
  down)
    cluster_down ;;
  run)
    if [ -n "$layout" ]; then
      hosts=$(echo "$layout" | tr ',' '\n' | wc -l)
    else
      layout=$(yes "$rph" | head -n "$hosts" | paste -sd,)
    fi
    [ "$hosts" -ge 1 ] && [ $# -ge 1 ] || usage
    probe
    owned=0
    # State left by a run that was killed, whose namespaces are gone: forget it rather than run in nothing.
    if [ -s "$STATE_DIR/prefix" ] && ! ip netns list | grep -q "^$(cat "$STATE_DIR/prefix")h0"; then
      echo "netns-cluster: the cluster $(cat "$STATE_DIR/prefix") in $STATE_DIR is gone; starting a new one"
      cluster_down
    fi
    if [ ! -s "$STATE_DIR/prefix" ]; then
      trap 'cluster_down' EXIT
      trap 'exit 130' INT TERM
      cluster_up "$hosts" "$rate" "$delay" >/dev/null || exit 1
      owned=1
    elif [ "$(cat "$STATE_DIR/hosts")" -lt "$hosts" ]; then
      echo "netns-cluster: the cluster that is up has fewer than $hosts hosts"; exit 1
    fi
    cluster_run "$layout" "$interleave" "$lanes" "$bind" "$@"
    status=$?
    [ $owned = 1 ] && cluster_down && trap - EXIT
    exit $status ;;
  *) usage ;;
esac

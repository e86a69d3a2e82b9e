#!/bin/bash
# Fault soak on the multi-host test bed (docs/testbed.md, "Fault soak"). Ranks on network-namespace hosts
# (scripts/netns-cluster.sh) run random collectives and relaxations of random sizes, each checked against an exact
# oracle (tests/mp/mp_soak.cc), while this script injects faults on the hosts' links:
#   transient, every 1.5-3.5 s on a random host for 1.5 s: loss of 1-5% of packets, delay jitter, reordering,
#             duplication of 1-3% (tc with a random BPF filter, as this kernel has no netem), or the link down for a
#             quarter of the timeout;
#   long, twice per job of 20 s or more: a host killed (SIGKILL to every process in it), later another host's link
#             down for twice the timeout. Jobs last --job-seconds (120) at most; a new job starts with every host.
# Ranks shrink after an error and go on; a job that runs out of ranks is followed by a new one. It checks:
# 0 wrong results; no error except within 2x the timeout (+1 s) after a long fault; every rank alive at a long
# fault reports an error within that window; nothing left behind (namespaces, processes, files).
#   scripts/soak.sh [--seconds N] [--job-seconds N] [--hosts H] [--ranks-per-host R] [--timeout S] [--seed X] [--no-faults]
#                   [--program build/bin/mp_soak]
# Exit 77 where namespaces or tc are not available (as netns-cluster.sh).
set -uo pipefail
cd "$(dirname "$0")/.."
seconds=60 job_seconds=120 hosts=4 rph=1 timeout=4 seed=$((RANDOM + 1)) faults=1 program=build/bin/mp_soak
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) seconds=$2; shift 2 ;;
    --job-seconds) job_seconds=$2; shift 2 ;;
    --hosts) hosts=$2; shift 2 ;;
    --ranks-per-host) rph=$2; shift 2 ;;
    --timeout) timeout=$2; shift 2 ;;
    --seed) seed=$2; shift 2 ;;
    --no-faults) faults=0; shift ;;
    --program) program=$2; shift 2 ;;
    *) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
  esac
done
[ -x "$program" ] || { echo "soak: $program is not built (scripts/build.sh)"; exit 2; }
program=$(readlink -f "$program")
cluster=$PWD/scripts/netns-cluster.sh
work=$(mktemp -d /tmp/bagua-soak.XXXXXX)
export BAGUA_NETNS_STATE=$work/state
prefix=""
# The rank processes of this soak, found through /proc (no procps needed).
rank_pids() {
  local p
  for p in /proc/[0-9]*; do
    [ "$(tr '\0' ' ' < "$p/cmdline" 2>/dev/null | cut -d' ' -f1)" = "$program" ] && echo "${p#/proc/}"
  done
}
cleanup() {
  "$cluster" down >/dev/null 2>&1
  rank_pids | xargs -r kill -9 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
"$cluster" up --hosts "$hosts" >/dev/null || exit $?
prefix=$(cat "$BAGUA_NETNS_STATE/prefix")
RANDOM=$seed

now() { date +%s.%N; }
ns() { echo "${prefix}h$1"; }
fault() { echo "$(now) $*" >> "$work/faults"; }
heal() {
  for h in $(seq 0 $((hosts - 1))); do
    clear_host "$h"
    ip -n "$(ns "$h")" link set eth0 up 2>/dev/null
  done
}
# A random host still in the job (not killed, not cut off).
pick_host() {
  local live=()
  for h in $(seq 0 $((hosts - 1))); do [[ " $gone " == *" $h "* ]] || live+=("$h"); done
  [ ${#live[@]} -gt 0 ] && echo "${live[$((RANDOM % ${#live[@]}))]}"
}
# Transient faults with tc, without netem (many kernels, this project's CI VM's included, lack it): a classic BPF
# filter draws a random number per packet (ld rand); the chosen packets are redirected to lo (lost), mirrored
# (duplicated), or queued behind a slower HTB class (reordered, or delayed by a varying amount: jitter).
random_filter() {  # random_filter PERCENT RESULT: the cBPF bytecode that returns RESULT for PERCENT% of packets
  local thr
  thr=$(awk -v p="$1" 'BEGIN {printf "%.0f", 4294967296 * (1 - p / 100)}')
  echo "4,32 0 0 4294963256,53 0 1 $thr,6 0 0 $2,6 0 0 0"
}
two_speeds() {  # two_speeds NS PERCENT SLOW_RATE: PERCENT% of packets through a class limited to SLOW_RATE
  ip netns exec "$1" tc qdisc add dev eth0 root handle 1: htb default 10 r2q 1000 2>/dev/null &&
    ip netns exec "$1" tc class add dev eth0 parent 1: classid 1:10 htb rate 10gbit 2>/dev/null &&
    ip netns exec "$1" tc class add dev eth0 parent 1: classid 1:20 htb rate "$3" ceil "$3" 2>/dev/null &&
    ip netns exec "$1" tc filter add dev eth0 parent 1: bpf bytecode "$(random_filter "$2" 4294967295)" flowid 1:20 \
      2>/dev/null
}
transient() {
  local h=$1 n p
  n=$(ns "$h")
  case $((RANDOM % 5)) in
    0) p=$((1 + RANDOM % 5)); fault transient loss "$h" "$p%"
       ip netns exec "$n" tc qdisc add dev eth0 clsact
       ip netns exec "$n" tc filter add dev eth0 egress bpf bytecode "$(random_filter "$p" 4294967295)" \
         action mirred egress redirect dev lo ;;
    1) fault transient jitter "$h"; two_speeds "$n" 30 200mbit ;;
    2) fault transient reorder "$h"; two_speeds "$n" 10 50mbit ;;
    3) p=$((1 + RANDOM % 3)); fault transient duplicate "$h" "$p%"
       ip netns exec "$n" tc qdisc add dev eth0 clsact
       ip netns exec "$n" tc filter add dev eth0 egress bpf bytecode "$(random_filter "$p" 4294967295)" \
         action mirred egress mirror dev eth0 ;;
    4) fault transient flap "$h"; ip -n "$n" link set eth0 down
       sleep "$(awk -v t="$timeout" 'BEGIN {print t / 4}')"; ip -n "$n" link set eth0 up; return ;;
  esac
  sleep 1.5
  clear_host "$h"
}
clear_host() {
  ip netns exec "$(ns "$1")" tc qdisc del dev eth0 root 2>/dev/null
  ip netns exec "$(ns "$1")" tc qdisc del dev eth0 clsact 2>/dev/null
}

start=$(date +%s)
job=0
while [ $(( $(date +%s) - start )) -lt "$seconds" ]; do
  left=$(( seconds - ($(date +%s) - start) ))
  [ "$job" -gt 0 ] && [ "$left" -lt 15 ] && break
  [ "$left" -gt "$job_seconds" ] && left=$job_seconds
  heal
  gone=""
  "$cluster" run --hosts "$hosts" --ranks-per-host "$rph" -- env BAGUA_TIMEOUT="$timeout" "$program" \
    --seconds "$left" --seed "$((seed + job))" > "$work/job$job.out" 2>&1 &
  pid=$!
  echo "$(now) job $job $left" >> "$work/faults"
  t0=$(date +%s)
  killed=0 cut=0
  while kill -0 "$pid" 2>/dev/null; do
    sleep "$(awk -v r=$RANDOM 'BEGIN {print 1.5 + 2 * r / 32768}')"
    kill -0 "$pid" 2>/dev/null || break
    [ "$faults" = 1 ] || continue
    t=$(( $(date +%s) - t0 ))
    if [ "$left" -ge 20 ] && [ $killed = 0 ] && [ "$t" -ge $(( left * 35 / 100 )) ]; then
      h=$(pick_host); killed=1
      [ -n "$h" ] || continue
      fault long kill "$h"; gone="$gone $h"
      ip netns pids "$(ns "$h")" | xargs -r kill -9 2>/dev/null
    elif [ "$left" -ge 20 ] && [ $cut = 0 ] && [ "$t" -ge $(( left * 65 / 100 )) ]; then
      h=$(pick_host); cut=1
      [ -n "$h" ] || continue
      fault long linkdown "$h"; gone="$gone $h"
      ip -n "$(ns "$h")" link set eth0 down
      sleep $(( 2 * timeout )); ip -n "$(ns "$h")" link set eth0 up
    else
      h=$(pick_host)
      [ -n "$h" ] && transient "$h"
    fi
  done
  wait "$pid" 2>/dev/null
  echo "$(now) end $job" >> "$work/faults"
  job=$((job + 1))
done
heal
"$cluster" down >/dev/null 2>&1

# Leftovers: namespaces of this cluster, rank processes.
leftover=""
ip netns list 2>/dev/null | grep -q "^$prefix" && leftover="$leftover namespaces"
[ -n "$(rank_pids)" ] && leftover="$leftover processes"

python3 - "$work" "$timeout" "$seconds" "$hosts" "$rph" "$seed" "$leftover" <<'PY'
import glob, re, sys
work, timeout, seconds, hosts, rph, seed, leftover = sys.argv[1], float(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5], sys.argv[6], sys.argv[7].strip()
window = 2 * timeout + 1.0
faults, jobs = [], []
for line in open(f"{work}/faults"):
    f = line.split()
    if f[1] == "job": jobs.append([float(f[0]), None, []])
    elif f[1] == "end": jobs[-1][1] = float(f[0])
    else: jobs[-1][2].append((float(f[0]), f[1], f[2], f[3]))
counts, problems = {}, []
total_ops = errors = wrong = shrinks = 0
inits, rss, worst = [], [], 0.0
for j, (t0, t1, fl) in enumerate(jobs):
    for _, cls, kind, _ in fl: counts[kind] = counts.get(kind, 0) + 1
    longs = [(t, kind, int(h)) for t, cls, kind, h in fl if cls == "long"]
    events, ops, ranks_seen = [], {}, set()  # events: (kind, time, rank, line)
    for line in open(f"{work}/job{j}.out", errors="replace"):
        m = re.match(r"(error|shrunk|left|WRONG) (\d+\.\d+) (\d+)", line)
        if m:
            kind, t, rank = m.group(1), float(m.group(2)), int(m.group(3))
            events.append((kind, t, rank, line.strip()))
            if kind == "WRONG": wrong += 1; problems.append(f"job {j}: {line.strip()}")
            if kind == "error":
                errors += 1
                near = [t - ft for ft, _, _ in longs if 0 <= t - ft <= window]
                if near: worst = max(worst, min(near))
                else: problems.append(f"job {j}: an error outside every long fault's window: {line.strip()}")
            continue
        m = re.match(r"summary rank=(\d+) ops=(\d+) errors=\d+ wrong=\d+ shrinks=(\d+) size=\d+ init_ms=(\d+) rss_kib=(\d+)", line)
        if m:
            ops[int(m.group(1))] = int(m.group(2))
            shrinks += int(m.group(3)); inits.append(int(m.group(4))); rss.append(int(m.group(5)))
    total_ops += max(ops.values()) if ops else 0
    if not ops: problems.append(f"job {j}: no rank reported its summary (see job{j}.out)")
    # Every rank still in the job at a long fault, and not on the faulty host, reports an error within the window.
    for ft, kind, h in longs:
        for rank in range(int(hosts) * int(rph)):
            if rank // int(rph) == h: continue
            gone = [t for k, t, r, _ in events if r == rank and k == "left" and t < ft]
            dead = any(ft2 < ft and h2 == rank // int(rph) for ft2, _, h2 in longs)
            if gone or dead or (rank not in ops and not any(r == rank for _, _, r, _ in events)): continue
            if not any(k == "error" and r == rank and 0 <= t - ft <= window for k, t, r, _ in events):
                problems.append(f"job {j}: rank {rank} reported no error within {window:g} s of the {kind} of host {h}")
if leftover: problems.append("left behind:" + leftover)
def med(v): return sorted(v)[len(v) // 2] if v else 0
kinds = ["loss", "jitter", "reorder", "duplicate", "flap", "kill", "linkdown"]
print(f"soak: {seconds} s, {hosts} hosts x {rph} ranks, BAGUA_TIMEOUT={timeout:g}, seed {seed}: {len(jobs)} job(s), "
      f"{total_ops} operations checked")
print("soak: faults: " + ", ".join(f"{k} {counts.get(k, 0)}" for k in kinds))
print(f"soak: errors reported {errors} (each within {worst:.2f} s of a long fault, window {window:g} s), "
      f"shrinks {shrinks}, wrong results {wrong}")
print(f"soak: init {med(inits)} ms median, {max(inits) if inits else 0} ms max; peak RSS {med(rss) / 1024:.1f} MiB "
      f"median, {max(rss) / 1024 if rss else 0:.1f} MiB max per rank")
for p in problems[:20]: print("soak: FAIL: " + p)
sys.exit(1 if problems else 0)
PY

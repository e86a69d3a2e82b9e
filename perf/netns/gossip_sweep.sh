#!/bin/bash
# Gossip step (ring, one-peer exponential) against allreduce on the test bed: 2, 4 and 8 hosts x 1 rank at
# 1 Gbit/s, 4/16/64 MiB. One table: time per step, speed-up over allreduce, and MiB each rank sends per step
# (constant for gossip as hosts grow; 2(n-1)/n of the buffer for a ring allreduce).
#   perf/netns/gossip_sweep.sh [build-dir]      (ITERS=3 HOSTS="2 4 8" RATE=1gbit)
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${1:-build}
ITERS=${ITERS:-3}
HOSTS=${HOSTS:-"2 4 8"}
RATE=${RATE:-1gbit}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
printf "%-6s %6s %-15s %10s %9s %14s\n" hosts size variant time_ms speedup sent_MiB/rank
for hosts in $HOSTS; do
  BAGUA_NETNS_STATE="$tmp/state" scripts/netns-cluster.sh run --hosts "$hosts" --ranks-per-host 1 --rate "$RATE" -- \
    "$PWD/$BUILD/bin/bagua_gossip_perf" -b 4M -e 64M -f 4 -n "$ITERS" -w 1 > "$tmp/out"
  awk -v hosts="$hosts" '!/^#/ && NF == 4 {
      if ($2 == "allreduce") base[$1] = $3
      printf "%-6s %5dM %-15s %10.1f %8.2fx %14.2f\n", hosts, $1 / 1048576, $2, $3, base[$1] / $3, $4 }' "$tmp/out"
done

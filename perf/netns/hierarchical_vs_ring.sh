#!/bin/bash
# Hierarchical allreduce against the host-adjacent flat ring on the test bed: 2 hosts x 2 ranks, 1 Gbit/s
# between hosts. Prints in-place time per size for each algorithm (median of ROUNDS alternating runs, default
# 3) and the speed-up over the ring. "auto" is the cost model's choice.
#   perf/netns/hierarchical_vs_ring.sh [build-dir] [rate]
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${1:-build}
RATE=${2:-1gbit}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
algos=(ring hier hier_leader auto)
ROUNDS=${ROUNDS:-3}
for round in $(seq "$ROUNDS"); do
  for a in "${algos[@]}"; do
    algo_env=()
    [ "$a" != auto ] && algo_env=(BAGUA_ALGO=allreduce:$a)
    BAGUA_NETNS_STATE="$tmp/state" scripts/netns-cluster.sh run --hosts 2 --ranks-per-host 2 --rate "$RATE" -- \
      env "${algo_env[@]}" "$PWD/$BUILD/bin/bagua_allreduce_perf" -b 1M -e 64M -f 4 -n 3 -w 1 -c 1 |
      awk '!/^#/ && NF > 10 {print $1, $10, $13}' >> "$tmp/$a.all"
  done
done
for a in "${algos[@]}"; do  # per size: median time, total wrong
  sort -n -k1,1 -k2,2 "$tmp/$a.all" | awk -v n="$ROUNDS" '{t[$1] = t[$1] " " $2; w[$1] += $3; c[$1]++}
    END {for (s in t) {split(substr(t[s], 2), v, " "); print s, v[int((c[s] + 1) / 2)], w[s]}}' | sort -n > "$tmp/$a"
done
printf "%8s" "size"
for a in "${algos[@]}"; do printf " %14s" "$a ms"; done
printf " %10s %10s %10s\n" "hier x" "leader x" "auto x"
while read -r size ring_us _; do
  printf "%8s" "$((size >> 20))M"
  for a in "${algos[@]}"; do
    printf " %14s" "$(awk -v s="$size" '$1 == s {printf "%.1f%s", $2 / 1000, ($3 != 0 ? " WRONG" : "")}' "$tmp/$a")"
  done
  for a in hier hier_leader auto; do
    printf " %10s" "$(awk -v s="$size" -v r="$ring_us" '$1 == s {printf "%.2f", r / $2}' "$tmp/$a")"
  done
  echo
done < "$tmp/ring"

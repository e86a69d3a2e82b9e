#!/bin/bash
# Allreduce on the network-namespace test bed: 2 hosts x 2 ranks and 4 hosts x 1 rank, links shaped to
# 1 and 10 Gbit/s. Prints one table of in-place busbw (GB/s) per size. A benchmark: never run in CI.
#   perf/netns/allreduce_sweep.sh [build-dir]
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${1:-build}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
configs=("2 2 1gbit" "4 1 1gbit" "2 2 10gbit" "4 1 10gbit")
for c in "${configs[@]}"; do
  read -r hosts rph rate <<< "$c"
  BAGUA_NETNS_STATE="$tmp/state" scripts/netns-cluster.sh run --hosts "$hosts" --ranks-per-host "$rph" --rate "$rate" -- \
    "$PWD/$BUILD/bin/bagua_allreduce_perf" -b 64K -e 64M -f 4 -n 5 -w 2 -c 1 |
    awk '!/^#/ && NF > 10 {print $1, $12, $13}' > "$tmp/${hosts}x${rph}_${rate}"
done
printf "%10s" "size"
for c in "${configs[@]}"; do read -r h r rate <<< "$c"; printf " %14s" "${h}x${r} @${rate}"; done
echo "   (in-place busbw, GB/s)"
while read -r size _; do
  label=$((size >> 10))K
  [ "$size" -ge $((1 << 20)) ] && label=$((size >> 20))M
  printf "%10s" "$label"
  for c in "${configs[@]}"; do
    read -r h r rate <<< "$c"
    printf " %14s" "$(awk -v s="$size" '$1 == s {print $2 ($3 != 0 ? " WRONG" : "")}' "$tmp/${h}x${r}_${rate}")"
  done
  echo
done < "$tmp/2x2_1gbit"

#!/bin/bash
# Quantized allreduce against full precision on the test bed (scripts/netns-cluster.sh): 4 hosts x 1 rank
# and 2 hosts x 2 ranks, at 1 and 10 Gbit/s, 4/16/64 MiB. One table: time (median of the slowest rank),
# speed-up over full precision, per-rank compute time (compress + decompress + owner step).
#   perf/netns/quantized_sweep.sh [build-dir]      (ITERS=3 RATES="1gbit 10gbit" LAYOUTS="4x1 2x2"; NETNS_FLAGS=--bind pins ranks)
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${1:-build}
ITERS=${ITERS:-3}
RATES=${RATES:-"1gbit 10gbit"}
LAYOUTS=${LAYOUTS:-"4x1 2x2"}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
printf "%-7s %-7s %6s %-14s %10s %9s %11s\n" setup link size variant time_ms speedup compute_ms
for layout in $LAYOUTS; do
  hosts=${layout%x*} per=${layout#*x}
  for rate in $RATES; do
    BAGUA_NETNS_STATE="$tmp/state" scripts/netns-cluster.sh run --hosts "$hosts" --ranks-per-host "$per" ${NETNS_FLAGS:-} \
      --rate "$rate" -- "$PWD/$BUILD/bin/bagua_quantized_perf" -b 4M -e 64M -f 4 -n "$ITERS" -w 1 > "$tmp/out"
    awk -v setup="$layout" -v rate="$rate" '!/^#/ && NF == 5 {
        if ($2 == "full") full[$1] = $3
        printf "%-7s %-7s %5dM %-14s %10.1f %8.2fx %11.1f%s\n", setup, rate, $1 / 1048576, $2, $3, full[$1] / $3, $4,
               ($5 == "yes" ? "" : "  OUTPUTS DIFFER") }' "$tmp/out"
  done
done

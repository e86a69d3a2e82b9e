#!/bin/bash
# What call fingerprints cost (docs/transport.md): bagua_allreduce_perf with them on and off (BAGUA_FINGERPRINT=0,
# a benchmark-only setting) in alternating rounds, 2 ranks (or $NP), float sum, in place, 4 KiB to 1 MiB.
# Prints per-size medians of the in-place time and the median of the per-round ratios on/off.
#   perf/compare/fingerprint_cost.sh [build-dir]    ROUNDS (default 9), ITERS (default 200), COLL (default allreduce)
set -euo pipefail
BUILD=${1:-build}
NP=${NP:-2}
ROUNDS=${ROUNDS:-9}
ITERS=${ITERS:-200}
COLL=${COLL:-allreduce}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
columns='$1, $10'
[ "$COLL" = alltoall ] && columns='$1, $6'
for round in $(seq "$ROUNDS"); do
  for setting in 1 0; do
    BAGUA_FINGERPRINT=$setting "$BUILD/bin/bagua-run" -n "$NP" "$BUILD/bin/bagua_${COLL}_perf" -b 4096 -e $((1 << 20)) \
      -f 4 -c 0 -n "$ITERS" -w 20 | awk "!/^#/ {print $columns}" > "$tmp/fp$setting.$round"
  done
done
python3 - "$tmp" "$ROUNDS" <<'PY'
import statistics, sys
tmp, rounds = sys.argv[1], int(sys.argv[2])
def load(setting):
    out = []
    for r in range(1, rounds + 1):
        out.append({int(s): float(t) for s, t in (line.split() for line in open(f"{tmp}/fp{setting}.{r}"))})
    return out
on, off = load(1), load(0)
print(f"{'size':>8} {'on us':>8} {'off us':>8} {'on/off':>7}  (median of {rounds} per-round ratios)")
for size in sorted(on[0]):
    ratios = [a[size] / b[size] for a, b in zip(on, off)]
    label = f"{size >> 20}M" if size >= 1 << 20 else f"{size >> 10}K"
    print(f"{label:>8} {statistics.median(a[size] for a in on):8.2f} {statistics.median(b[size] for b in off):8.2f} "
          f"{statistics.median(ratios):7.3f}")
PY

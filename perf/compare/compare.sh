#!/bin/bash
# Allreduce busbw of bagua, Open MPI and Gloo on this host, in one go: 2 ranks (or $NP), float sum, in place,
# 4 KiB to 64 MiB. COLL=alltoall compares bagua_alltoall_perf with MPI_Alltoall instead (no Gloo column). Five
# alternating rounds ($ROUNDS); the table shows per-size medians and ratios. Each run is nccl-tests' default sweep
# right after init: 5 warm-up and 20 timed iterations per size ($ITERS), so a slow start shows. WRITTEN=1 writes
# each input before every call and times the calls alone, in every tool: what an application's freshly computed
# data costs (a single-copy read then fetches lines dirty in the writer's cache), where the default, as in
# nccl-tests, sends the same clean buffer over and over. Open MPI runs unbound (--bind-to none); bagua-run gives
# each rank its own cores (--bind auto).
#   perf/compare/compare.sh [build-dir]
set -euo pipefail
BUILD=${1:-build}
NP=${NP:-2}
ROUNDS=${ROUNDS:-5}
ITERS=${ITERS:-20}
COLL=${COLL:-allreduce}
WRITTEN=${WRITTEN:-0}
MIN=4096
MAX=$((64 << 20))
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

tools="bagua_${COLL}_perf mpi_collective_perf"
[ "$COLL" = allreduce ] && tools="$tools gloo_allreduce_perf"
for tool in $tools; do
  [ -x "$BUILD/bin/$tool" ] || { echo "missing $BUILD/bin/$tool (BAGUA_WITH_PEERS=1 scripts/install-deps.sh, then rebuild)"; exit 1; }
done

for round in $(seq "$ROUNDS"); do
  # bagua: in-place time (column 10) and busbw (column 12) of nccl-tests' table; alltoall has no in-place form
  columns='$1, $10, $12'
  [ "$COLL" = alltoall ] && columns='$1, $6, $8'
  "$BUILD/bin/bagua-run" -n "$NP" ${BAGUA_RUN_FLAGS:-} "$BUILD/bin/bagua_${COLL}_perf" -b $MIN -e $MAX -f 4 -c 0 \
    -n "$ITERS" -w 5 -W "$WRITTEN" | awk "!/^#/ {print $columns}" > "$tmp/bagua.$round"
  mpirun --allow-run-as-root --bind-to none --oversubscribe -np "$NP" "$BUILD/bin/mpi_collective_perf" "$COLL" $MIN $MAX 4 \
    "$ITERS" "$WRITTEN" > "$tmp/mpi.$round"
  if [ "$COLL" = allreduce ]; then
    store=$(mktemp -d -p "$tmp")
    GLOO_STORE_DIR=$store "$BUILD/bin/bagua-run" -n "$NP" "$BUILD/bin/gloo_allreduce_perf" $MIN $MAX 4 "$ITERS" "$WRITTEN" > "$tmp/gloo.$round"
  fi
done

python3 - "$tmp" "$ROUNDS" "$COLL" <<'PY'
import os, statistics, sys
tmp, rounds, coll = sys.argv[1], int(sys.argv[2]), sys.argv[3]
def load(name):
    rows = {}
    for r in range(1, rounds + 1):
        for line in open(f"{tmp}/{name}.{r}"):
            size, us, bw = line.split()
            rows.setdefault(int(size), []).append((float(us), float(bw)))
    return {s: (statistics.median(u for u, _ in v), statistics.median(b for _, b in v)) for s, v in rows.items()}
ours, mpi = load("bagua"), load("mpi")
gloo = load("gloo") if coll == "allreduce" else {s: (float("nan"), float("nan")) for s in ours}
print(f"{'size':>10} {'bagua us':>9} {'MPI us':>9} {'bagua GB/s':>10} {'MPI GB/s':>9} {'Gloo GB/s':>9} {'x MPI':>6} {'x Gloo':>7}")
for size in sorted(ours):
    (bu, bb), (mu, mb), (gu, gb) = ours[size], mpi[size], gloo[size]
    label = f"{size >> 20}M" if size >= 1 << 20 else f"{size >> 10}K"
    print(f"{label:>10} {bu:9.1f} {mu:9.1f} {bb:10.2f} {mb:9.2f} {gb:9.2f} {bb / mb:6.2f} {bb / gb:7.1f}")
PY

#!/bin/bash
# The Python layer's cost: bagua.Scheduler driven from Python (perf/python/compare.py --scheduler-only) against
# bagua_bucket_perf's "no-overlap" row, same tensors (BERT-base / 6), 4 MiB buckets, no simulated compute,
# alternating ROUNDS times (default 5); prints both medians of communication time per step and their ratio.
#   perf/python/compare.sh [BUILD_DIR]   (NP ranks, default 4)
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}
np=${NP:-4}
rounds=${ROUNDS:-5}
python=$(command -v /usr/bin/python3 || command -v python3)
cpp=() py=()
for ((r = 0; r < rounds; r++)); do
  cpp+=("$("$build/bin/bagua-run" -n "$np" "$build/bin/bagua_bucket_perf" --ns-per-param 0 --steps 20 2>/dev/null |
    awk '/^no-overlap/ {print $4}')")
  py+=("$(PYTHONPATH="$build/python" "$build/bin/bagua-run" -n "$np" "$python" perf/python/compare.py --scheduler-only \
    --steps 20 2>/dev/null | awk '/^python scheduler/ {print $9}')")
done
median() { printf '%s\n' "$@" | sort -g | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }
c=$(median "${cpp[@]}") p=$(median "${py[@]}")
echo "C++ bagua_bucket_perf no-overlap ms/step: ${cpp[*]} (median $c)"
echo "Python bagua.Scheduler communication ms/step: ${py[*]} (median $p)"
awk -v c="$c" -v p="$p" 'BEGIN {printf "Python / C++: %.3f\n", p / c}'

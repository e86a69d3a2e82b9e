#!/bin/bash
# The alltoall calibration at init (docs/algorithms.md, "Measured at init"): mp_init on 2 ranks forms two
# communicators of one host (and a split of both ranks, which takes its parent's factor), and with debug logging each
# rank logs one calibration line per communicator it measures and block size (two sizes, or one where the ranks outnumber the cores), the same factor and decision on both ranks. Skipped (77) where cross-memory attach is off: no shared
# segments, nothing to calibrate.
#   calibration_check.sh BAGUA_RUN MP_INIT
set -euo pipefail
run=$1 program=$2
out=$(BAGUA_LOG_LEVEL=debug "$run" -n 2 "$program" 2>&1) || { echo "$out"; echo "FAIL: mp_init failed"; exit 1; }
if grep -q "single-copy transfers between host peers: off" <<<"$out"; then
  echo "SKIP: no cross-memory attach here"
  exit 77
fi
lines=$(grep -o "alltoall of [0-9]* KiB blocks through shared segments took [0-9.]*x the time of single-copy reads ([0-9. a-z]*): [a-z ]*" <<<"$out" || true)
echo "$lines"
count=$(grep -c . <<<"$lines" || true)
case $count in
  8) [ "$(grep -o "of [0-9]* KiB" <<<"$lines" | sort -u | wc -l)" = 2 ] || { echo "FAIL: expected two block sizes"; exit 1; } ;;
  4) grep -q "ranks on this machine share" <<<"$out" || { echo "FAIL: one block size, yet the ranks have their own cores"; exit 1; } ;;
  *) echo "FAIL: expected 8 calibration lines (2 ranks x 2 communicators x 2 block sizes), or 4 where ranks share cores"; exit 1 ;;
esac
# mp_init's split of every rank takes its parent's factor: one line per rank, and no calibration of its own.
[ "$(grep -c "shared-copy factor taken from the parent communicator" <<<"$out")" = 2 ] ||
  { echo "FAIL: the split of every rank did not take its parent's factor"; exit 1; }
# Two distinct lines at most: one per communicator, each logged identically by both ranks.
[ "$(sort <<<"$lines" | uniq -c | awk '$1 % 2 != 0' | wc -l)" = 0 ] || { echo "FAIL: the ranks disagree"; exit 1; }
echo "ok"

#!/bin/bash
# The flight recorder end to end: mp_trace on 3 ranks (on demand, then the last rank skipping an allreduce), then
# bagua-trace on the files the ranks wrote, which must name the mismatch and what each rank waited for.
#   trace_check.sh BAGUA_RUN MP_TRACE BAGUA_TRACE
set -euo pipefail
run=$1 program=$2 trace=$3
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
export BAGUA_TIMEOUT=2
BAGUA_TRACE_DIR=$dir "$run" -n 3 "$program" ondemand
ls "$dir"/on-demand-rank{0,1,2}.txt >/dev/null
rm "$dir"/on-demand-rank*.txt
BAGUA_TRACE_DIR=$dir "$run" -n 3 "$program" skip
files=$(ls "$dir"/bagua-trace-*-rank*.txt | wc -l)
[ "$files" = 3 ] || { echo "FAIL: $files flight recorder files, expected 3"; ls -l "$dir"; exit 1; }
out=$("$trace" "$dir")
echo "$out"
fail() { echo "FAIL: bagua-trace did not say: $1"; exit 1; }
grep -q "communicator 0x[0-9a-f]*: 3 ranks, traces from 3" <<<"$out" || fail "3 ranks"
grep -q "MISMATCH at collective #2:.*rank 0 called allreduce #2.*rank 2 called barrier #2" <<<"$out" || fail "the mismatch"
grep -q "rank 0: failed: allreduce #2 (1000 x float32.*; waiting for: .*rank" <<<"$out" || fail "what rank 0 waited for"
grep -q "rank 2: failed: barrier #2.*; waiting for: " <<<"$out" || fail "what rank 2 waited for"
grep -q "rank 1: last completed: allreduce #1" <<<"$out" || fail "the last completed operation"
echo "trace_check: ok"

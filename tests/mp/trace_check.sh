#!/bin/bash
# The flight recorder end to end: mp_trace on 3 ranks (on demand, then the last rank skipping an allreduce), then
# bagua-trace on the files the ranks wrote, which must name the mismatch and what each rank waited for.
#   trace_check.sh BAGUA_RUN MP_TRACE BAGUA_TRACE
set -euo pipefail
run=$1 program=$2 trace=$3
for p in "$run" "$program" "$trace"; do [ -x "$p" ] || { echo "FAIL: $p is not built"; exit 1; }; done
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
export BAGUA_TIMEOUT=2
BAGUA_TRACE_DIR=$dir "$run" -n 3 "$program" ondemand
ls "$dir"/on-demand-rank{0,1,2}.txt >/dev/null
rm "$dir"/on-demand-rank*.txt
# skip also leaves an early on-demand file per rank: bagua-trace must read each rank's later one.
BAGUA_TRACE_DIR=$dir "$run" -n 3 "$program" skip
files=$(ls "$dir"/bagua-trace-*-rank*.txt "$dir"/early-rank*.txt | wc -l)
[ "$files" = 6 ] || { echo "FAIL: $files flight recorder files, expected 6"; ls -l "$dir"; exit 1; }
out=$("$trace" "$dir" 2>"$dir/stderr")
echo "$out"
fail() { echo "FAIL: bagua-trace did not say: $1"; exit 1; }
grep -q "communicator 0x[0-9a-f]*: 3 ranks, traces from 3" <<<"$out" || fail "3 ranks"
grep -q "MISMATCH at collective #2:.*rank 0 called allreduce #2.*rank 2 called barrier #2" <<<"$out" || fail "the mismatch"
[ "$(grep -c MISMATCH <<<"$out")" = 1 ] || fail "one mismatch only (sends and receives are not collectives)"
grep -q "rank 0: failed: allreduce #2 (1000 x float32.*; waiting for: .*rank" <<<"$out" || fail "what rank 0 waited for"
grep -q "rank 2: failed: barrier #2.*; waiting for: " <<<"$out" || fail "what rank 2 waited for"
grep -q "rank 1: last completed: \(send\|receive\) #0 of 4 x int32" <<<"$out" || fail "the last completed operation"
[ "$(grep -c "both hold rank" "$dir/stderr")" = 3 ] || fail "which of two files of one rank it read"
rm -f "$dir"/*
BAGUA_TRACE_DIR=$dir "$run" -n 3 "$program" behind
out=$("$trace" "$dir")
echo "$out"
grep -q "behind: rank 2 (last collective #1, others reached #2)" <<<"$out" || fail "rank 2 is behind"
grep -q "rank 2: nothing in flight" <<<"$out" || fail "rank 2 had nothing in flight"
echo "trace_check: ok"

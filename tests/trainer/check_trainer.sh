#!/bin/bash
# The trainer's promises, with fixed seeds (the trainer's defaults):
#  - every algorithm's final held-out accuracy is within its tolerance of full precision with the same
#    optimizer (allreduce + SGD for bytegrad, decentralized, lpdec, async; allreduce + Adam for qadam and
#    onebit_adam): 1 percentage point, async 2;
#  - allreduce on 1 rank and on 4 ranks gives the same loss curve (relative 1e-4 per epoch);
#  - overlap and --no-overlap give bit-identical weights.
#   check_trainer.sh <bagua-run> <bagua_trainer>
set -euo pipefail
RUN=$1 TRAINER=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
train() { local out=$1 n=$2; shift 2; "$RUN" -n "$n" "$TRAINER" "$@" > "$tmp/$out"; grep '^summary' "$tmp/$out"; }
field() { sed -n "s/^summary.* $2=\([^ ]*\).*/\1/p" "$tmp/$1"; }

train ref_sgd 4 --algorithm allreduce
train ref_adam 4 --algorithm allreduce --optimizer adam
train ref_inline 4 --algorithm allreduce --no-overlap
train ref_one 1 --algorithm allreduce
fail=0
[ "$(field ref_sgd weights)" = "$(field ref_inline weights)" ] || { echo "FAIL: overlap and --no-overlap weights differ"; fail=1; }
paste <(grep '^epoch' "$tmp/ref_sgd" | awk '{print $4}') <(grep '^epoch' "$tmp/ref_one" | awk '{print $4}') |
  awk '{d = $1 - $2; if (d < 0) d = -d; if (d > 1e-4 * $1) {print "FAIL: epoch " NR - 1 " loss " $1 " on 4 ranks, " $2 " on 1"; bad = 1}}
       END {exit bad}' || fail=1
for spec in bytegrad:sgd:0.01 qadam:adam:0.01 onebit_adam:adam:0.01 decentralized:sgd:0.01 lpdec:sgd:0.01 async:sgd:0.02; do
  IFS=: read -r algo opt tol <<< "$spec"
  train "$algo" 4 --algorithm "$algo"
  ref=$(field "ref_$opt" accuracy) acc=$(field "$algo" accuracy)
  awk -v a="$acc" -v r="$ref" -v t="$tol" -v name="$algo" 'BEGIN {d = a - r; if (d < 0) d = -d;
      printf "%-14s accuracy %.4f, full precision %.4f, tolerance %.2f: %s\n", name, a, r, t, (d <= t ? "ok" : "FAIL");
      exit (d <= t ? 0 : 1)}' || fail=1
done
exit $fail

#!/bin/bash
# bagua_trainer --elastic: rank 2 of 4 kills itself with SIGKILL mid-epoch; the 3 survivors must shrink, go on and
# end within 1 percentage point of the accuracy of an undisturbed 4-rank run (same seed and epochs), with every
# epoch's loss reported and the last one below the first.
#   check_elastic.sh <bagua-run> <bagua_trainer> [algorithm]
set -euo pipefail
RUN=$1 TRAINER=$2 ALGO=${3:-allreduce}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export BAGUA_TIMEOUT=10
"$RUN" -n 4 "$TRAINER" --algorithm "$ALGO" --epochs 4 > "$tmp/ref"
status=0
"$RUN" -n 4 --keep-going "$TRAINER" --algorithm "$ALGO" --epochs 4 --elastic --kill-rank 2 --kill-step 100 \
  > "$tmp/elastic" 2> "$tmp/elastic.err" || status=$?
cat "$tmp/elastic"
fail=0
[ "$status" = 137 ] || { echo "FAIL: bagua-run exited $status, expected 137 (rank 2 killed)"; cat "$tmp/elastic.err"; fail=1; }
grep -q '^# elastic: a peer was lost' "$tmp/elastic" || { echo "FAIL: no recovery reported"; fail=1; }
[ "$(grep -c '^epoch' "$tmp/elastic")" = 4 ] || { echo "FAIL: not every epoch reported"; fail=1; }
grep -q '^summary.* ranks=3 ' "$tmp/elastic" || { echo "FAIL: the run did not end on 3 ranks"; fail=1; }
field() { sed -n "s/^summary.* $2=\([^ ]*\).*/\1/p" "$1"; }
awk -v a="$(field "$tmp/elastic" accuracy)" -v r="$(field "$tmp/ref" accuracy)" 'BEGIN {d = a - r; if (d < 0) d = -d;
    printf "elastic accuracy %.4f, undisturbed 4 ranks %.4f: %s\n", a, r, (d <= 0.01 ? "ok" : "FAIL"); exit (d <= 0.01 ? 0 : 1)}' ||
  fail=1
grep '^epoch' "$tmp/elastic" | awk 'NR == 1 {first = $4} {last = $4} END {if (!(last < first)) {print "FAIL: loss did not fall"; exit 1}}' ||
  fail=1
exit $fail

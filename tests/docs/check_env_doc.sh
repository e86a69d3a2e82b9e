#!/bin/bash
# Every variable in bagua's environment table (bagua-info --env) has its row in docs/environment.md.
set -euo pipefail
info=$1
doc=$2
missing=0
count=0
for name in $("$info" --env | awk 'NR > 1 {print $1}'); do
  count=$((count + 1))
  grep -q "^| \`$name\` |" "$doc" || { echo "FAIL: $name is read by bagua but missing from $doc"; missing=1; }
done
[ "$count" -gt 20 ] || { echo "FAIL: bagua-info --env listed only $count variables"; exit 1; }
[ $missing = 0 ] && echo "all $count environment variables are documented"
exit $missing

#!/bin/bash
# Checks that no file under src/ includes a layer above its own, and that only src/base/env.cc reads the
# environment. The order (docs/architecture.md), lowest first;
# folders on one line are peers and do not include each other:
#   base
#   kernels topology bootstrap
#   transport
#   core
#   algorithms
#   api
# The public header (include/bagua/bagua.h) sits below everything.
set -euo pipefail
cd "$(dirname "$0")/.."
declare -A level=([base]=1 [kernels]=2 [topology]=2 [bootstrap]=2 [transport]=3 [core]=4 [algorithms]=5 [api]=6)
bad=0
while IFS= read -r file; do
  layer=${file#src/}
  layer=${layer%%/*}
  [ -n "${level[$layer]:-}" ] || { echo "check-layers: $file is in src/$layer, which has no place in the order" >&2; bad=1; continue; }
  while IFS= read -r inc; do
    to=${inc%%/*}
    [ "$to" = "$layer" ] && continue
    [ -n "${level[$to]:-}" ] || continue  # bagua/bagua.h, system and third-party headers
    if [ "${level[$to]}" -ge "${level[$layer]}" ]; then
      echo "check-layers: $file ($layer) includes \"$inc\" ($to), which is not below it" >&2
      bad=1
    fi
  done < <(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$file")
done < <(find src -type f \( -name '*.h' -o -name '*.cc' -o -name '*.cu' -o -name '*.cuh' \) | sort)
# Environment variables are read in one place (src/base/env.cc holds the table that bagua-info prints).
if grep -rn --include='*.cc' --include='*.h' --include='*.cu' 'getenv' src tools | grep -v '^src/base/env\.cc:' |
  grep -v 'getenv_fn'; then
  echo "check-layers: the lines above read the environment directly; use env_get (src/base/env.h)" >&2
  bad=1
fi
[ $bad = 0 ] && echo "check-layers: every include under src/ points down (base < kernels, topology, bootstrap < transport < core < algorithms < api)"
exit $bad

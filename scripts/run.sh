#!/bin/bash
# The main demo: installs what is missing, builds, and runs a 4-rank job on this host.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh
exec build/bin/bagua-run -n "${BAGUA_DEMO_RANKS:-4}" build/bin/bagua_demo

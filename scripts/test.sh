#!/bin/bash
# The whole test suite: installs what is missing, builds, and runs every test with ctest.
# Exits non-zero when any test fails. Extra arguments go to ctest (e.g. -L unit, -R allreduce).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh
cd build
ctest --output-on-failure --timeout 300 "$@"

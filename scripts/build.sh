#!/bin/bash
# Configures and builds bagua into build/ (incremental; logs in build/*.log). Used by run.sh and test.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
mkdir -p build
if [ ! -f build/CMakeCache.txt ]; then
  echo "build: configuring (build/configure.log)"
  cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo ${BAGUA_CMAKE_ARGS:-} >build/configure.log 2>&1 ||
    { cat build/configure.log; rm -f build/CMakeCache.txt; exit 1; }
fi
echo "build: compiling (build/build.log)"
cmake --build build -j"$(nproc)" >build/build.log 2>&1 || { grep -E 'error|Error' build/build.log | head -40; exit 1; }

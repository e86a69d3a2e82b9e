#!/bin/bash
# libFuzzer with AddressSanitizer and UndefinedBehaviorSanitizer over bagua's parsers (tests/fuzz: the bootstrap
# frames and handshake, BAGUA_ALGO, the compression config, topology edges, the environment). Builds build-fuzz/
# with clang 14, then runs each target from its seed corpus (tests/fuzz/corpus/<target>, copied, so the
# repository is not touched) for SECONDS (default 30), or for N executions with --runs N, and prints each
# target's executions. Fails on any crash, leak or sanitizer report (the reproducer is left in build-fuzz/).
#   scripts/fuzz.sh [SECONDS]    scripts/fuzz.sh --runs N    (FUZZ_TARGETS="env topology" for a subset)
set -euo pipefail
cd "$(dirname "$0")/.."
limit="-max_total_time=${1:-30}"
[ "${1:-}" = --runs ] && limit="-runs=$2"
BAGUA_WITH_FUZZ=1 scripts/install-deps.sh
targets=${FUZZ_TARGETS:-bootstrap algo_spec compression topology env}
san="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fsanitize=fuzzer-no-link -fno-omit-frame-pointer"
cmake -S . -B build-fuzz -DCMAKE_C_COMPILER=clang-14 -DCMAKE_CXX_COMPILER=clang++-14 -DBAGUA_FUZZ=ON \
  -DBAGUA_CUDA=OFF -DBAGUA_BUILD_PERF=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_C_FLAGS=$san" \
  "-DCMAKE_CXX_FLAGS=$san" >build-fuzz.log 2>&1 || { tail -30 build-fuzz.log; exit 1; }
cmake --build build-fuzz -j"$(nproc)" --target $(printf 'fuzz_%s ' $targets) >>build-fuzz.log 2>&1 ||
  { grep -E 'error|Error' build-fuzz.log | head -30; exit 1; }
status=0
for t in $targets; do
  corpus=$(mktemp -d)
  cp tests/fuzz/corpus/"$t"/* "$corpus"/ 2>/dev/null || true
  log=build-fuzz/fuzz_$t.log
  start=$SECONDS
  if (cd build-fuzz && UBSAN_OPTIONS=print_stacktrace=1 ./bin/fuzz_"$t" "$corpus" "$limit" -print_final_stats=1 \
    -rss_limit_mb=2048 -max_len=4096 >"fuzz_$t.log" 2>&1); then
    runs=$(awk '/stat::number_of_executed_units/ {print $2}' "$log")
    echo "fuzz: $t: ${runs:-?} executions in $((SECONDS - start)) s, corpus $(ls "$corpus" | wc -l) inputs, no failure"
  else
    echo "fuzz: $t FAILED (log and reproducer in build-fuzz/):"
    grep -E 'ERROR|SUMMARY|runtime error|Test unit written' "$log" | head -10
    status=1
  fi
  rm -rf "$corpus"
done
exit $status

#!/bin/bash
# The test suite under sanitizers (docs/ci.md). Builds with g++ and runs a named subset:
#   scripts/sanitize.sh asan   AddressSanitizer + UndefinedBehaviorSanitizer (build-asan/): the unit tests and the
#                              multi-process tests below, leaks checked at exit
#   scripts/sanitize.sh tsan   ThreadSanitizer (build-tsan/, only the programs these tests run): the tests that run
#                              library threads or several threads per process (async averaging, abort from another
#                              thread, threads as ranks, the device proxy's thread, the bucket scheduler, the
#                              shrink agreement's dialers, the flight recorder's dump, the idle-progress thread of
#                              communicators across logical hosts)
# Any sanitizer report fails the test that printed it. Suppressions (tests/sanitizers/) cover third-party code
# only, each with its reason. Extra arguments go to ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:?usage: scripts/sanitize.sh asan|tsan [ctest args]}
shift
BAGUA_WITH_SANITIZERS=1 scripts/install-deps.sh
supp=$PWD/tests/sanitizers
case $mode in
  asan)
    flags="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
    # Multi-process tests of every kind of call, failure and relaxation, on 2 and 3 ranks.
    tests='^(mp_collectives_2|mp_collectives_forced_3|mp_collectives_device_2|mp_collectives_mixed_3|mp_allreduce_[23]|mp_allreduce_large|mp_p2p_[23]|mp_init_[23]|mp_quantized_[23]|mp_quantized_rounds_3|mp_quantized_hier_4|mp_gossip_[23]|mp_gossip_hier_4|mp_scheduler_orders_2|mp_scheduler_errors_3|mp_scheduler_failure_3|mp_device_semantics_2|mp_device_relaxations_[23]|mp_device_failure|mp_device_failure_quantized_stream|mp_device_blocked_stream|mp_device_ipc_stream_3|mp_device_abort|mp_device_lagging_2|mp_threads_init|mp_hostile_bootstrap|mp_mismatch_[23]|mp_trace_3|mp_missing_rank|mp_failures|mp_shrink)$'
    targets=all
    labels="-L unit"
    export ASAN_OPTIONS="detect_leaks=1:abort_on_error=0:halt_on_error=1:detect_stack_use_after_return=0"
    export LSAN_OPTIONS="suppressions=$supp/lsan.supp:print_suppressions=0"
    export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
    ;;
  tsan)
    flags="-fsanitize=thread -fno-omit-frame-pointer"
    tests='^(mp_gossip_2|mp_device_semantics_2|mp_device_relaxations_2|mp_device_relaxations_3|mp_device_failure_quantized_stream|mp_device_abort|mp_device_threads|mp_device_threads_proxy|mp_device_blocked_stream|mp_device_long_ahead|mp_device_ipc_stream_3|mp_scheduler_blocked_2|mp_scheduler_device_3|mp_device_failure|mp_threads_init|mp_scheduler_orders_2|mp_scheduler_overlap_2|mp_scheduler_errors_3|mp_scheduler_failure_3|mp_scheduler_tune_2hosts_4|mp_gossip_hier_4|mp_failures|mp_shrink|mp_trace_3)$'
    targets="bagua-run bagua-trace mp_device mp_gossip mp_scheduler mp_threads_init mp_trace mp_failures mp_shrink"
    labels=""
    export TSAN_OPTIONS="suppressions=$supp/tsan.supp:halt_on_error=1:second_deadlock_stack=1:report_signal_unsafe=0"
    ;;
  *) echo "sanitize: mode is asan or tsan, not '$mode'" >&2; exit 2 ;;
esac
# UCX's memory hooks patch malloc and mmap, which the sanitizers intercept too.
export UCX_MEM_MALLOC_HOOKS=no UCX_MEM_MMAP_HOOK_MODE=none UCX_MEM_EVENTS=no
build=build-$mode
cmake -S . -B "$build" -DBAGUA_CUDA=OFF -DBAGUA_BUILD_PERF=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  "-DCMAKE_C_FLAGS=$flags" "-DCMAKE_CXX_FLAGS=$flags" >"$build.log" 2>&1 || { tail -30 "$build.log"; exit 1; }
cmake --build "$build" -j"$(nproc)" --target $targets >>"$build.log" 2>&1 || { grep -E 'error|Error' "$build.log" | head -30; exit 1; }
cd "$build"
status=0
if [ -n "$labels" ]; then ctest --output-on-failure --timeout 600 $labels "$@" || status=1; fi
ctest --output-on-failure --timeout 600 -R "$tests" "$@" || status=1
exit $status

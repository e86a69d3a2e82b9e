#!/bin/bash
# On a machine with a GPU: every device test on the real GPU, then the device benchmarks, into one report.
#   scripts/gpu-check.sh [--standin] [--only LIST] [output-file]     (default gpu-check.txt)
# LIST is a comma-separated subset of the steps below (e.g. --only cuda,matrix). The whole run is budgeted at
# 6 minutes when every step passes (each step has its own timeout; a stalled one ends after BAGUA_TIMEOUT + 2 s); a
# GPU lease is 15 minutes in all, its start included, so leave room for a second, shorter run. A later issue's device
# tests add their steps here. `scripts/gpu-check.sh --pack` prepares what to carry (below). --standin runs the
# steps on the host stand-in for the CUDA runtime (BAGUA_DEVICE_STANDIN=1), to try the script where no GPU is;
# the CUDA-only steps then skip.
#
# It runs what build/ holds; nothing is compiled here. libbagua links cudart statically; the binaries still need
# UCX, hwloc, fmt and OpenSSL's libcrypto. Where they are missing, carry Debian's .deb files in gpu-debs/ (made on
# the build machine with `scripts/gpu-check.sh --fetch-debs`): they are unpacked under gpu-debs/root and put on
# LD_LIBRARY_PATH. CUDA's default lazy module loading is kept on purpose (docs/cuda.md).
set -uo pipefail
cd "$(dirname "$0")/.."
DEBS=(libucx0 libhwloc15 libfmt9 libssl3 libnuma1 libibverbs1 librdmacm1 libltdl7 libudev1)

if [ "${1:-}" = --fetch-debs ]; then
  mkdir -p gpu-debs && cd gpu-debs && apt-get download "${DEBS[@]}" && ls -1 *.deb
  exit $?
fi
# --pack: gpu-pack.tar.gz, what a GPU machine needs from this build within a 64 MiB transfer: the binaries the steps
# run (debug info stripped), the library, the Python package and the .deb files (58 MiB unpacked on 2026-12-06,
# 21 MiB packed). Carry gpu-pack.tar.gz; on the GPU machine, in the repository:
#   rm -rf build gpu-debs && tar xzf gpu-pack.tar.gz && scripts/gpu-check.sh OUT
if [ "${1:-}" = --pack ]; then
  rm -rf gpu-pack && mkdir -p gpu-pack/build/bin gpu-pack/build/lib gpu-pack/build/python gpu-pack/gpu-debs || exit 1
  for b in bagua-run cuda_stream_gate cuda_kernels cuda_device_path mp_collectives mp_device mp_scheduler \
    bagua_cuda_kernels_perf bagua_allreduce_perf bagua_allgather_perf bagua_broadcast_perf bagua_quantized_perf; do
    strip --strip-debug -o "gpu-pack/build/bin/$b" "build/bin/$b" || exit 1
  done
  cp -a build/lib/libbagua.so* gpu-pack/build/lib/ && strip --strip-debug gpu-pack/build/lib/libbagua.so.*.*.* &&
    cp -a build/python/bagua gpu-pack/build/python/ || exit 1
  (cd gpu-pack/gpu-debs && apt-get download "${DEBS[@]}" >/dev/null 2>&1) || exit 1
  tar czf gpu-pack.tar.gz -C gpu-pack build gpu-debs || exit 1
  echo "gpu-pack.tar.gz: $(du -sh gpu-pack | cut -f1) unpacked, $(du -sh gpu-pack.tar.gz | cut -f1) packed"
  rm -rf gpu-pack
  exit 0
fi
ONLY=""
STANDIN=0
if [ "${1:-}" = --standin ]; then
  STANDIN=1
  shift
fi
if [ "${1:-}" = --only ]; then
  ONLY=",$2,"
  shift 2
fi
OUT=${1:-gpu-check.txt}
if ls gpu-debs/*.deb >/dev/null 2>&1; then
  mkdir -p gpu-debs/root
  for deb in gpu-debs/*.deb; do dpkg -x "$deb" gpu-debs/root; done
  export LD_LIBRARY_PATH="$PWD/gpu-debs/root/usr/lib/x86_64-linux-gnu:$PWD/gpu-debs/root/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export UCX_MODULE_DIR="$PWD/gpu-debs/root/usr/lib/x86_64-linux-gnu/ucx"
fi
unset CUDA_MODULE_LOADING BAGUA_DEVICE_STANDIN
# A stalled step ends within BAGUA_TIMEOUT + 2 s (the device proxy's monitor): keep it short, since a GPU lease is
# 15 minutes all told. Steps that need another set their own.
export BAGUA_TIMEOUT=${BAGUA_TIMEOUT:-10}
[ $STANDIN = 1 ] && export BAGUA_DEVICE_STANDIN=1
B=build/bin
# The python3 of the Python step: BAGUA_PYTHON3, else the first python3 on PATH that has pytest (the GPU machine's
# plain python3 holds torch and pytest; on a build machine a pyenv python3 may come first without them).
PY=${BAGUA_PYTHON3:-}
if [ -z "$PY" ]; then
  for candidate in $(which -a python3 2>/dev/null); do
    if "$candidate" -c 'import pytest' 2>/dev/null; then PY=$candidate && break; fi
  done
fi
PY=${PY:-python3}
RUN="$B/bagua-run"
status=0
failed=()

# step NAME TIMEOUT COMMAND...: runs it (when selected), prints its output and exit code and time.
step() {
  local name=$1 limit=$2
  shift 2
  [ -z "$ONLY" ] || [[ "$ONLY" == *",${name%%:*},"* ]] || return 0
  echo "== $name: $*"
  local start=$SECONDS
  # Line-buffered, so that a step killed at its limit keeps what it printed.
  timeout "$limit" stdbuf -oL -eL "$@"
  local rc=$?
  echo "== $name: exit $rc in $((SECONDS - start)) s"
  if [ $rc = 77 ] && [ $STANDIN = 1 ]; then
    echo "== $name: skipped on the stand-in"
  elif [ $rc != 0 ]; then
    status=1
    failed+=("$name")
  fi
}

{
  echo "== gpu-check $(date -u +%Y-%m-%dT%H:%M:%SZ), $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
  nvidia-smi --query-gpu=name,uuid,pci.bus_id,driver_version,memory.total,compute_cap --format=csv 2>&1 ||
    echo "nvidia-smi not found"
  # What a parked user stream blocks (a report), and a protocol that no user work behind the gate can stall.
  step cuda:stream_gate 90 $B/cuda_stream_gate
  # Kernels and the CUDA-only device checks (capture, lazy loading, cudaMallocAsync, managed memory).
  step cuda:kernels 120 $B/cuda_kernels
  step cuda:device_path 60 $B/cuda_device_path
  # The mp_collectives matrix on device memory, processes sharing the GPU; mixed host/device ranks; forced
  # algorithms; the staged path across logical hosts (a BAGUA_HOST_ID per pair of ranks).
  for n in 2 3 4; do step matrix:$n 90 $RUN -n $n $B/mp_collectives matrix device; done
  step matrix:mixed 90 $RUN -n 3 $B/mp_collectives matrix mixed
  # The same on the proxy's data path: the in-host IPC path, driven by the proxy thread (docs/cuda.md).
  step matrix:proxy-2 90 env BAGUA_DEVICE_DATA_PATH=proxy $RUN -n 2 $B/mp_collectives matrix device
  step matrix:forced 90 $RUN -n 4 $B/mp_collectives forced device
  step matrix:hosts 90 $RUN -n 4 sh -c 'BAGUA_HOST_ID=gpu-check-host$((BAGUA_RANK / 2)) exec "$0" matrix device' \
    $B/mp_collectives
  # Stream semantics, failure, abort, the memory limit, thread ranks.
  step device:semantics 60 $RUN -n 2 $B/mp_device semantics
  step device:failure 60 env BAGUA_TIMEOUT=4 $RUN -n 3 $B/mp_device failure
  step device:abort 60 $RUN -n 2 $B/mp_device abort
  step device:limit 60 env BAGUA_DEVICE_MEMORY_LIMIT=1048576 BAGUA_ALGO=allreduce:ring $RUN -n 2 $B/mp_device limit
  step device:threads 60 $B/mp_device threads
  step device:ipc 60 env BAGUA_IPC_CACHE_ENTRIES=2 $RUN -n 3 $B/mp_device ipc
  # The in-host path on the caller's stream (the default): a buffer's first call staged, later ones through IPC.
  step device:ipc-stream 60 $RUN -n 3 $B/mp_device ipc_stream
  step device:scheduler 90 $RUN -n 2 $B/mp_scheduler device
  # (The stand-in plays the driver's blocking pageable copies, with 200 ms copies, as the ctest of the same name.)
  blocked_env=()
  [ $STANDIN = 1 ] && blocked_env=(BAGUA_STANDIN_BLOCKING_COPIES=1 BAGUA_STANDIN_COPY_US=200000)
  step device:scheduler-blocked 60 env BAGUA_TIMEOUT=2 "${blocked_env[@]}" $RUN -n 2 $B/mp_scheduler blocked
  step device:relaxations 90 $RUN -n 2 $B/mp_device relaxations
  step device:relaxations-proxy 90 env BAGUA_DEVICE_DATA_PATH=proxy $RUN -n 2 $B/mp_device relaxations
  # The quantized allreduce's rail and leader forms compressing on the GPU (logical hosts of 2+2 and 2+1 ranks),
  # and a peer killed during a quantized allreduce that compresses on the GPU (BAGUA_DEVICE_DATA_PATH=proxy).
  step device:relaxations-hosts 120 env BAGUA_DEVICE_DATA_PATH=proxy $RUN -n 4 sh -c \
    'BAGUA_HOST_ID=gpu-check-host$((BAGUA_RANK / 2)) exec "$0" relaxations' $B/mp_device
  step device:relaxations-leader 120 env BAGUA_DEVICE_DATA_PATH=proxy $RUN -n 3 sh -c \
    'BAGUA_HOST_ID=gpu-check-host$((BAGUA_RANK / 2)) exec "$0" relaxations' $B/mp_device
  # The rail and leader forms again with their kernels in phases on the caller's stream (the default path).
  step device:relaxations-hosts-stream 120 $RUN -n 4 sh -c \
    'BAGUA_HOST_ID=gpu-check-host$((BAGUA_RANK / 2)) exec "$0" relaxations' $B/mp_device
  step device:relaxations-leader-stream 120 $RUN -n 3 sh -c \
    'BAGUA_HOST_ID=gpu-check-host$((BAGUA_RANK / 2)) exec "$0" relaxations' $B/mp_device
  # Staged calls of 12 MiB between two logical hosts: copies in pieces around the host algorithm, exact.
  step device:pipelined 90 $RUN -n 4 sh -c 'BAGUA_HOST_ID=gpu-check-host$((BAGUA_RANK / 2)) exec "$0" pipelined' \
    $B/mp_device
  step device:failure-quantized 60 env BAGUA_TIMEOUT=4 BAGUA_DEVICE_DATA_PATH=proxy $RUN -n 3 $B/mp_device failure quantized
  # The same with the kernels in phases on the caller's stream (the default).
  step device:failure-quantized-stream 60 env BAGUA_TIMEOUT=4 $RUN -n 3 $B/mp_device failure quantized
  # Two ranks naming the one GPU differently, by index and by UUID: the same GPU, so the IPC path is taken.
  uuid=$(nvidia-smi --query-gpu=uuid --format=csv,noheader 2>/dev/null | head -1)
  step device:visible 60 env BAGUA_IPC_CACHE_ENTRIES=2 $RUN -n 2 sh -c \
    'if [ "$BAGUA_RANK" = 0 ]; then export CUDA_VISIBLE_DEVICES=0; else export CUDA_VISIBLE_DEVICES='"$uuid"'; fi; exec "$0" ipc' \
    $B/mp_device
  # One multi-rank run under compute-sanitizer.
  if command -v compute-sanitizer >/dev/null; then
    step sanitizer 150 env BAGUA_TIMEOUT=120 $RUN -n 2 compute-sanitizer --tool memcheck --error-exitcode 9 \
      $B/mp_device semantics
    # Every CUDA kernel (odd counts and chunks, offset buffers), and the relaxations compressing on the GPU (on the
    # caller's stream, the default).
    step sanitizer:kernels 180 compute-sanitizer --tool memcheck --error-exitcode 9 $B/cuda_kernels
    step sanitizer:quantized 150 env BAGUA_TIMEOUT=120 $RUN -n 2 compute-sanitizer --tool memcheck \
      --error-exitcode 9 $B/mp_device relaxations
    # The late-span kernels on peers' mapped buffers (the in-host path on the caller's stream).
    step sanitizer:ipc-stream 150 env BAGUA_TIMEOUT=120 $RUN -n 2 compute-sanitizer --tool memcheck \
      --error-exitcode 9 $B/mp_device ipc_stream
  elif [ -z "$ONLY" ] || [[ "$ONLY" == *",sanitizer,"* ]]; then
    echo "== sanitizer: compute-sanitizer not found"
  fi
  # The Python binding's suite with CUDA tensors (tests/python/test_cuda.py) on the machine's python3 and torch.
  step python 240 env PYTHONPATH=build/python BAGUA_QUANTIZED_MIN_BYTES=0 BAGUA_TIMEOUT=30 $RUN -n 2 \
    "$PY" -m pytest -q -p no:cacheprovider tests/python
  # Benchmarks: kernels, then allreduce on device and on host memory, 2 ranks sharing the GPU; then the quantized one.
  step perf:kernels 90 $B/bagua_cuda_kernels_perf
  step perf:device 90 $RUN -n 2 $B/bagua_allreduce_perf -M device -b 4K -e 256M -f 4
  # The in-host path run by the proxy thread (BAGUA_DEVICE_DATA_PATH=proxy), against the caller's stream above.
  step perf:device-proxy 90 env BAGUA_DEVICE_DATA_PATH=proxy $RUN -n 2 $B/bagua_allreduce_perf -M device -b 4K \
    -e 256M -f 4
  step perf:host 90 $RUN -n 2 $B/bagua_allreduce_perf -M host -b 4K -e 256M -f 4
  # Two other collectives' IPC path (peer_memory from 1 MiB and 256 KiB on 2 ranks) and their staged sizes below.
  step perf:device-others 90 $RUN -n 2 sh -c '"$0" -M device -b 64K -e 256M -f 16 && "$1" -M device -b 64K -e 256M -f 16' \
    $B/bagua_allgather_perf $B/bagua_broadcast_perf
  # Staged allreduce between two logical hosts, copies pipelined (the default) and not.
  for p in 1 0; do
    step perf:pipelined-$p 90 env BAGUA_PIPELINED_STAGING=$p $RUN -n 2 sh -c \
      'BAGUA_HOST_ID=gpu-check-host$BAGUA_RANK exec "$0" -M device -b 4M -e 256M -f 4' $B/bagua_allreduce_perf
  done
  # The quantized allreduce on device memory between two logical hosts on the one GPU, 64 MiB.
  # Compressed on the caller's stream (the default), then by the proxy thread.
  for p in stream proxy; do
    step perf:quantized-$p 90 env BAGUA_DEVICE_DATA_PATH=$p $RUN -n 2 sh -c \
      'BAGUA_HOST_ID=gpu-check-host$BAGUA_RANK exec "$0" -M device -b 64M -e 64M' $B/bagua_quantized_perf
  done
  # torch.distributed's gloo on CUDA tensors (and NCCL's refusal of two ranks on one GPU), when python3 has torch.
  step perf:torch 150 perf/gpu/compare.sh build
  echo "== result: $([ $status = 0 ] && echo ok || echo "FAILED: ${failed[*]}")"
  exit $status
} 2>&1 | tee "$OUT"
exit "${PIPESTATUS[0]}"

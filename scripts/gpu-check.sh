#!/bin/bash
# On a machine with a GPU: prints the driver and device, runs every CUDA test and the CUDA kernel benchmark
# (under 5 minutes), and writes everything to one file.
#   scripts/gpu-check.sh [output-file]          (default gpu-check.txt)
#
# It runs what build/ holds; nothing is compiled here. libbagua links cudart statically; the binaries still
# need UCX, hwloc, fmt and OpenSSL's libcrypto. Where they are missing, carry Debian's .deb files in gpu-debs/
# (made on the build machine with `scripts/gpu-check.sh --fetch-debs`): they are unpacked under
# gpu-debs/root and put on LD_LIBRARY_PATH.
set -uo pipefail
cd "$(dirname "$0")/.."
DEBS=(libucx0 libhwloc15 libfmt9 libssl3 libnuma1 libibverbs1 librdmacm1 libltdl7 libudev1)

if [ "${1:-}" = --fetch-debs ]; then
  mkdir -p gpu-debs && cd gpu-debs && apt-get download "${DEBS[@]}" && ls -1 *.deb
  exit $?
fi

OUT=${1:-gpu-check.txt}
if ls gpu-debs/*.deb >/dev/null 2>&1; then
  mkdir -p gpu-debs/root
  for deb in gpu-debs/*.deb; do dpkg -x "$deb" gpu-debs/root; done
  export LD_LIBRARY_PATH="$PWD/gpu-debs/root/usr/lib/x86_64-linux-gnu:$PWD/gpu-debs/root/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export UCX_MODULE_DIR="$PWD/gpu-debs/root/usr/lib/x86_64-linux-gnu/ucx"
fi

{
  echo "== gpu-check $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv 2>&1 || echo "nvidia-smi not found"
  status=0
  for test in build/bin/cuda_device_pointer build/bin/cuda_kernels; do
    echo "== $test"
    timeout 120 "$test"
    rc=$?
    echo "exit $rc"
    [ $rc = 0 ] || status=1
  done
  echo "== build/bin/bagua_cuda_kernels_perf"
  timeout 120 build/bin/bagua_cuda_kernels_perf || status=1
  echo "== result: $([ $status = 0 ] && echo ok || echo FAILED)"
  exit $status
} 2>&1 | tee "$OUT"
exit "${PIPESTATUS[0]}"

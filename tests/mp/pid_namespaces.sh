#!/bin/bash
# Ranks of one host in separate PID namespaces (containers that share the host's IPC namespace, each running its
# program as pid 1): a pid names another process there, so single-copy reads, shared segments and same-process
# checks must not trust it. Each rank runs as pid 1 of its own namespace; every collective must stay exact, on host
# memory and on the device stand-in, and the ranks must say why single copy is off.
#   pid_namespaces.sh BAGUA_RUN MP_COLLECTIVES
set -uo pipefail
run=$1 program=$2
for p in "$run" "$program"; do [ -x "$p" ] || { echo "FAIL: $p is not built"; exit 1; }; done
unshare --pid --fork --kill-child --mount-proc true 2>/dev/null || { echo "pid_namespaces: unshare --pid is not permitted; skipping"; exit 77; }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
# Without UCX_TLS: bagua leaves out UCX's sysv transport, which does not connect them (docs/transport.md).
unset UCX_TLS
export BAGUA_LOG_LEVEL=debug
for memory in host device; do
  if [ $memory = device ]; then export BAGUA_DEVICE_STANDIN=1; fi
  if ! "$run" -n 2 unshare --pid --fork --kill-child --mount-proc "$program" matrix $([ $memory = device ] && echo device) \
      > "$dir/$memory.log" 2>&1; then
    grep -v DEBUG "$dir/$memory.log" | tail -20
    echo "FAIL: the matrix on $memory memory, ranks in separate PID namespaces"
    exit 1
  fi
  said=$(grep -c "no single copy: rank [01] runs in another PID namespace" "$dir/$memory.log")
  [ "$said" = 2 ] || { echo "FAIL: $said of 2 ranks said that single copy is off for the PID namespace"; exit 1; }
  grep "matrix:" "$dir/$memory.log"
done
echo "pid_namespaces: exact on host and device memory, single copy off"

#include "base/env.h"

#include <cstdlib>
#include <cstring>

#include "base/error.h"

namespace bagua {

namespace {

// A plain array: nothing to construct or destroy, so it is there during static initialisation and at exit.
constexpr EnvSetting kSettings[] = {
    {"BAGUA_RANK", "this rank", "launcher"},
    {"BAGUA_WORLD_SIZE", "number of ranks", "launcher"},
    {"BAGUA_LOCAL_RANK", "rank on this host (checked against the detected layout)", "launcher"},
    {"BAGUA_LOCAL_SIZE", "ranks on this host", "launcher"},
    {"BAGUA_ROOT_ADDR", "host:port of the rendezvous root", "launcher"},
    {"BAGUA_ROOT_HOSTED", "1: the launcher serves the rendezvous (bagua-run)", "launcher"},
    {"BAGUA_ROOT_FILE", "file where rank 0 writes the root address and the others read it", "user"},
    {"BAGUA_SECRET", "hex job secret for HMAC authentication of the bootstrap", "launcher"},
    {"BAGUA_TIMEOUT", "seconds any wait may take (default 30)", "user"},
    {"BAGUA_LOG_LEVEL", "none, error, warn (default), info, debug, trace", "user"},
    {"BAGUA_LOG_FILE", "log file instead of stderr; %h host, %p pid", "user"},
    {"BAGUA_SOCKET_IFNAME", "network interface (name or prefix) for bootstrap sockets", "user"},
    {"BAGUA_ALGO", "algorithm override, e.g. allreduce:0-64K:rd,64K-:ring;broadcast:tree", "user"},
    {"BAGUA_HOST_ID", "override of the host identity (boot id + IPC namespace)", "user"},
    {"BAGUA_TOPO_FILE", "hwloc XML standing in for this machine", "user"},
    {"BAGUA_BIND", "1: bind each rank's threads to its NUMA node", "user"},
    {"BAGUA_CPU_KERNELS", "scalar or avx2: use slower CPU reduction and compression loops than the CPU allows", "user"},
    {"BAGUA_CMA",
     "0: no cross-memory attach between ranks of a host (no single-copy, no direct allreduce, no shared-memory "
     "alltoall)",
     "user"},
    {"BAGUA_IDLE_PROGRESS",
     "0: no background thread progressing communicators between calls (a rank that waits elsewhere after a "
     "call may then stall peers across hosts, or on one host over TCP, until it calls again; "
     "docs/transport.md)",
     "user"},
    {"BAGUA_RING_SEGMENT", "bytes per segment of the pipelined ring allreduce (default 512K)", "user"},
    {"BAGUA_RING_WINDOW", "segments of the ring allreduce in flight at once (default 4)", "user"},
    {"BAGUA_SINGLE_COPY_MIN",
     "smallest message sent by single copy between ranks of a host (default 16K; a pipeline's pieces from 64K)",
     "user"},
    {"BAGUA_DEVICE_MEMORY_LIMIT",
     "bytes of staging memory (and device scratch) the device calls of one communicator may hold (default 1 GiB)",
     "user"},
    {"BAGUA_IPC_CACHE_ENTRIES",
     "peers' device allocations each communicator keeps mapped through CUDA IPC (default 64)", "user"},
    {"BAGUA_PIPELINED_STAGING",
     "0: staged device calls copy all input in before the algorithm and all output out after it (default 1: in "
     "pieces, overlapped)",
     "user"},
    {"BAGUA_DEVICE_DATA_PATH",
     "stream (default): device calls stage through pinned memory with copies on the caller's stream; proxy: the "
     "library's thread makes the copies, the in-host CUDA IPC path and compression on the device",
     "user"},
    {"BAGUA_DEVICE_TIMING",
     "1: device calls whose kernels run in phases on the caller's stream add their GPU time to the stats' compute_ns",
     "user"},
    {"BAGUA_DEVICE_STANDIN", "1: testing only; a host stand-in for the CUDA runtime (threads as streams)", "user"},
    {"BAGUA_STANDIN_GPU", "testing only: the identity of the stand-in's GPU (default standin-gpu-0)", "user"},
    {"BAGUA_STANDIN_IPC_FAILS", "testing only: 1 makes the stand-in fail to open peers' IPC handles", "user"},
    {"BAGUA_STANDIN_COPY_US", "testing only: every stand-in copy takes at least this many microseconds", "user"},
    {"BAGUA_STANDIN_WAIT_LAG_US",
     "testing only: a stand-in stream reaches each stream wait this many microseconds after the work before it",
     "user"},
    {"BAGUA_STANDIN_BLOCKING_COPIES",
     "testing only: 1 makes stand-in copies to or from pageable memory block, holding a lock", "user"},
    {"BAGUA_INTER_HOST_GBPS", "GB/s between hosts, for the cost model (default 1.25)", "user"},
    {"BAGUA_QUANTIZED_MIN_BYTES",
     "quantized allreduce below this many input bytes sends full precision (default: 1 MiB within one host, 32 KiB "
     "across hosts; 0: always quantize)",
     "user"},
    {"BAGUA_QUANTIZED_ONE_ROUND_BYTES",
     "quantized allreduce runs its alltoall and allgather in one round each up to this many compressed bytes per "
     "rank and phase (default 512 KiB; 0: never)",
     "user"},
    {"BAGUA_TRACE_SIZE", "operations each communicator's flight recorder keeps (default 1000; 0: off)", "user"},
    {"BAGUA_TRACE_DIR",
     "folder where each rank writes its flight recorder when a communicator fails (and bagua_comm_dump_trace with no "
     "path)",
     "user"},
    {"BAGUA_FINGERPRINT",
     "0: benchmarks only; messages carry no call fingerprint, so mismatched calls are not detected (default 1)",
     "user"},
    {"RANK", "this rank, when BAGUA_RANK is unset", "torchrun"},
    {"WORLD_SIZE", "number of ranks, when BAGUA_WORLD_SIZE is unset", "torchrun"},
    {"LOCAL_RANK", "rank on this host", "torchrun"},
    {"MASTER_ADDR", "rendezvous host; bagua uses port MASTER_PORT+1", "torchrun"},
    {"MASTER_PORT", "torchrun's store port; bagua's root listens on the next one", "torchrun"},
    {"OMPI_COMM_WORLD_RANK", "this rank, under mpirun", "Open MPI"},
    {"OMPI_COMM_WORLD_SIZE", "number of ranks, under mpirun", "Open MPI"},
    {"OMPI_COMM_WORLD_LOCAL_RANK", "rank on this host, under mpirun", "Open MPI"},
    {"SLURM_PROCID", "this rank, under srun", "Slurm"},
    {"SLURM_NTASKS", "number of ranks, under srun", "Slurm"},
    {"SLURM_LOCALID", "rank on this host, under srun", "Slurm"},
    {"UCX_TLS",
     "UCX transports, read as UCX will use them (the environment, else a ucx.conf file); bagua keeps "
     "shared-memory error handling only when they allow shared memory, sets the TCP settings only when "
     "they allow TCP, and sets ^sysv where host peers run in other PID namespaces unless they name a list other than "
     "all",
     "UCX"},
    {"UCX_MM_ERROR_HANDLING", "bagua sets y unless set in the environment or UCX_TLS leaves shared memory out", "UCX"},
    {"UCX_KEEPALIVE_INTERVAL", "bagua sets timeout/3 (at least 100 ms) unless set in the environment", "UCX"},
    {"UCX_TCP_CONN_NB",
     "bagua sets y (non-blocking TCP connect) unless set in the environment or UCX_TLS leaves TCP out", "UCX"},
    {"UCX_TCP_SNDBUF",
     "bagua sets 128K (bounds the egress queue a rendezvous reply waits in) unless set in the environment "
     "or UCX_TLS leaves TCP out",
     "UCX"},
    {"UCX_RNDV_SEND_NBR_THRESH", "bagua sets 2 MiB (eager pieces) unless set in the environment", "UCX"},
    {"HWLOC_LIBXML_IMPORT", "0: hwloc's built-in XML parser only (bagua reads it for its error message)", "hwloc"},
    {"HWLOC_LIBXML", "older name of HWLOC_LIBXML_IMPORT", "hwloc"},
    {"HWLOC_PLUGINS_PATH", "where hwloc looks for its plugins (bagua reads it for its error message)", "hwloc"},
};

}  // namespace

std::span<const EnvSetting> env_settings() { return kSettings; }

const char* env_get(const char* name) {
  for (const EnvSetting& s : env_settings())
    if (std::strcmp(s.name, name) == 0) return std::getenv(name);
  fail(BAGUA_ERR_INTERNAL, "environment variable {} is read but not listed in base/env.cc", name);
}

const char* env_get_nonempty(const char* name) {
  const char* value = env_get(name);
  return value != nullptr && *value != '\0' ? value : nullptr;
}

}  // namespace bagua

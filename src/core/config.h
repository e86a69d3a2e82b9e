// Effective communicator configuration: the caller's bagua_config_t merged over the environment and defaults.
#pragma once

#include <cstdint>
#include <string>

#include "bagua/bagua.h"

namespace bagua {

struct Config {
  int timeout_ms = 30000;
  bool bind_numa = false;
  // BAGUA_IDLE_PROGRESS: a background thread progresses the transport between calls (core/idle_progress.h)
  bool idle_progress = true;
  std::string comm_name;
  std::string algo;                       // BAGUA_ALGO, used by algorithm selection
  size_t ring_segment_bytes = 512 << 10;  // BAGUA_RING_SEGMENT: pipelined ring message size
  int ring_window = 4;                    // BAGUA_RING_WINDOW: ring segments in flight
  size_t single_copy_bytes = 16 << 10;
  // BAGUA_SINGLE_COPY_MIN: smallest message read directly between host peers (pipelined kEager sends: at least
  // kEagerSingleCopyMin)
  double inter_host_gbps = 1.25;  // BAGUA_INTER_HOST_GBPS: link between hosts, for algorithm selection
  // BAGUA_QUANTIZED_MIN_BYTES: a quantized allreduce below this many input bytes sends full precision; -1: the cost
  // model's sizes (CostModel::quantized_min_bytes_*)
  long long quantized_min_bytes = -1;
  // BAGUA_QUANTIZED_ONE_ROUND_BYTES: a quantized allreduce's phases run in one round each up to this many compressed
  // bytes per rank; -1: the cost model's (CostModel::quantized_one_round_bytes); 0: never
  long long quantized_one_round_bytes = -1;
  // BAGUA_DEVICE_MEMORY_LIMIT: the most memory (pinned host and device) this communicator's device calls hold
  size_t device_memory_limit = size_t{1} << 30;
  // BAGUA_IPC_CACHE_ENTRIES: peers' device allocations each communicator keeps mapped through IPC
  size_t ipc_cache_entries = 64;
  // BAGUA_PIPELINED_STAGING=0: staged device calls copy all their input in before the host algorithm starts and
  // all their output out after it ends (docs/cuda.md); the default overlaps them in pieces
  bool pipelined_staging = true;
  // BAGUA_DEVICE_DATA_PATH: stream (default): every device call stages with its copies on the caller's stream, so the
  // proxy thread makes no CUDA call for it (docs/cuda.md); proxy: the proxy thread makes the copies, and the in-host
  // IPC path and compression on the device run
  bool device_path_on_stream = true;
  // BAGUA_DEVICE_TIMING=1: device calls whose kernels run in phases on the caller's stream time them with the GPU's
  // clock and add the time to bagua_stats_t.compute_ns (two tiny kernels per phase; docs/cuda.md)
  bool device_timing = false;
  size_t trace_size = 1000;  // BAGUA_TRACE_SIZE: operations the flight recorder keeps (0: off)
  std::string trace_dir;     // BAGUA_TRACE_DIR: where each rank writes its flight recorder on failure
  // BAGUA_FINGERPRINT=0: messages carry only the call's kind and receives match it exactly (core/tags.h); for
  // measuring what fingerprints cost, not for use
  bool fingerprints = true;

  // Defaults overridden by BAGUA_TIMEOUT (seconds, may be fractional), BAGUA_BIND, BAGUA_ALGO.
  static Config from_env();
  // Validates a caller's struct as NCCL validates ncclConfig_t and merges it over from_env().
  // Throws INVALID_ARGUMENT on a bad size, magic, version or field value.
  static Config from_user(const bagua_config_t* user);

  // Hash of everything that must agree across ranks (anything that steers algorithm choice).
  uint64_t agreement_hash() const;
};

// Smallest bagua_config_t a caller may pass: the header fields plus timeout_ms.
constexpr size_t kMinConfigSize = offsetof(bagua_config_t, timeout_ms) + sizeof(int);

// Parses a decimal number of seconds ("30", "2.5") into milliseconds; false if malformed or out of range.
bool parse_timeout_seconds(const std::string& text, int* timeout_ms);

}  // namespace bagua

// Shared bits of the relaxation perf tools (bagua_quantized_perf, bagua_gossip_perf): argument parsing,
// status checks, the slowest rank's value, traffic counters.
#pragma once

#include <cstdio>
#include <cstdlib>

#include "bagua/bagua.h"

#define PERF_OK(call)                                                                \
  do {                                                                               \
    bagua_status_t s_ = (call);                                                      \
    if (s_ != BAGUA_SUCCESS) {                                                       \
      std::fprintf(stderr, "%s failed: %s\n", #call, bagua_get_last_error(nullptr)); \
      std::exit(1);                                                                  \
    }                                                                                \
  } while (0)

inline size_t perf_parse_size(const char* s) {
  char* end;
  double v = std::strtod(s, &end);
  switch (*end) {
    case 'K':
    case 'k': v *= 1 << 10; break;
    case 'M':
    case 'm': v *= 1 << 20; break;
    case 'G':
    case 'g': v *= 1 << 30; break;
  }
  return static_cast<size_t>(v);
}

// Exits with a message unless the sweep ends (factor >= 2, begin <= end) and runs at least one iteration.
inline void perf_check_sweep(size_t begin, size_t end, size_t factor, int iters, int warmup) {
  if (factor < 2 || begin == 0 || begin > end || iters < 1 || warmup < 0) {
    std::fprintf(stderr, "need -f >= 2, 0 < -b <= -e, -n >= 1 and -w >= 0\n");
    std::exit(2);
  }
}

inline double perf_max_over_ranks(double v, bagua_comm_t comm) {
  PERF_OK(bagua_allreduce(&v, &v, 1, BAGUA_FLOAT64, BAGUA_MAX, comm, nullptr));
  return v;
}

inline bagua_stats_t perf_stats(bagua_comm_t comm) {
  bagua_stats_t stats;
  stats.size = sizeof(stats);
  PERF_OK(bagua_comm_get_stats(comm, &stats));
  return stats;
}

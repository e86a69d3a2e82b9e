// Tiny assertion helpers for multi-process test programs (run under bagua-run; a failure exits non-zero
// and names the rank, the line and the library's last error).
#pragma once

#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "bagua/bagua.h"

#define MP_CHECK(cond)                                                                                           \
  do {                                                                                                           \
    if (!(cond)) {                                                                                               \
      std::fprintf(stderr, "%s:%d: check failed: %s (rank env %s; last error: %s)\n", __FILE__, __LINE__, #cond, \
                   std::getenv("BAGUA_RANK") ? std::getenv("BAGUA_RANK") : "?", bagua_get_last_error(nullptr));  \
      std::exit(1);                                                                                              \
    }                                                                                                            \
  } while (0)

#define MP_OK(call)                                                                                                   \
  do {                                                                                                                \
    bagua_status_t mp_status_ = (call);                                                                               \
    if (mp_status_ != BAGUA_SUCCESS) {                                                                                \
      std::fprintf(stderr, "%s:%d: %s returned %s: %s\n", __FILE__, __LINE__, #call, bagua_status_string(mp_status_), \
                   bagua_get_last_error(nullptr));                                                                    \
      std::exit(1);                                                                                                   \
    }                                                                                                                 \
  } while (0)

inline double mp_seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

inline int mp_env_int(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::atoi(v) : -1;
}

// Puts ranks 2k and 2k+1 on one logical host (BAGUA_HOST_ID, read at init) for hierarchical tests on one
// machine; call before bagua_comm_init_from_env.
inline void mp_pair_ranks_on_logical_hosts(const char* prefix) {
  char id[64];
  std::snprintf(id, sizeof id, "%s%d", prefix, mp_env_int("BAGUA_RANK") / 2);
  setenv("BAGUA_HOST_ID", id, 1);
}

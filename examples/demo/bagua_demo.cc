// The main demo (scripts/run.sh): a job forms, each rank shows where it runs, and barriers are timed.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "bagua/bagua.h"

#define DEMO_OK(call)                                                                                             \
  do {                                                                                                            \
    bagua_status_t s_ = (call);                                                                                   \
    if (s_ != BAGUA_SUCCESS) {                                                                                    \
      std::fprintf(stderr, "%s failed: %s: %s\n", #call, bagua_status_string(s_), bagua_get_last_error(nullptr)); \
      return 1;                                                                                                   \
    }                                                                                                             \
  } while (0)

int main() {
  bagua_comm_t comm = nullptr;
  DEMO_OK(bagua_comm_init_from_env(&comm));
  int rank = 0, size = 0, local_rank = 0, local_size = 0;
  DEMO_OK(bagua_comm_rank(comm, &rank));
  DEMO_OK(bagua_comm_size(comm, &size));
  DEMO_OK(bagua_comm_local_rank(comm, &local_rank));
  DEMO_OK(bagua_comm_local_size(comm, &local_size));

  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  if (rank == 0)
    std::printf("bagua %d: %d ranks formed a communicator\n\n  rank  local  host\n", bagua_get_version(), size);
  std::fflush(stdout);
  // Print in rank order: each rank waits its turn between barriers.
  for (int turn = 0; turn < size; ++turn) {
    if (turn == rank) {
      std::printf("  %4d  %d/%d    %s (pid %d)\n", rank, local_rank, local_size, host, static_cast<int>(getpid()));
      std::fflush(stdout);
    }
    DEMO_OK(bagua_barrier(comm, nullptr));
  }

  const int warmup = 50, iterations = 500;
  std::vector<double> micros;
  for (int i = 0; i < warmup + iterations; ++i) {
    auto start = std::chrono::steady_clock::now();
    DEMO_OK(bagua_barrier(comm, nullptr));
    double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
    if (i >= warmup) micros.push_back(us);
  }
  std::sort(micros.begin(), micros.end());
  if (rank == 0)
    std::printf("\n  barrier (dissemination over UCX), %d iterations: median %.1f us, p90 %.1f us, min %.1f us\n",
                iterations, micros[micros.size() / 2], micros[micros.size() * 9 / 10], micros.front());
  DEMO_OK(bagua_comm_destroy(comm));
  return 0;
}

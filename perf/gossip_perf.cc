// Gossip step against allreduce, under any launcher:
//   bagua_gossip_perf [-b 4M] [-e 64M] [-f 4] [-n iters] [-w warmup]
// One line per (size, variant): median time per step (each the slowest rank's) and the bytes each rank
// sent per step (the most of any rank, from bagua_stats_t). Variants: allreduce (the library's choice of
// algorithm, averaging), gossip-ring and gossip-onepeer (one bagua_neighbor_allreduce step each).
#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include "perf/relaxation_perf.h"

int main(int argc, char** argv) {
  size_t begin = 4 << 20, end = 64 << 20, factor = 4;
  int iters = 5, warmup = 1;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (i + 1 >= argc) {
      std::fprintf(stderr, "usage: %s [-b bytes] [-e bytes] [-f factor] [-n iters] [-w warmup]\n", argv[0]);
      return 2;
    }
    if (a == "-b")
      begin = perf_parse_size(argv[++i]);
    else if (a == "-e")
      end = perf_parse_size(argv[++i]);
    else if (a == "-f")
      factor = std::strtoul(argv[++i], nullptr, 10);
    else if (a == "-n")
      iters = std::atoi(argv[++i]);
    else if (a == "-w")
      warmup = std::atoi(argv[++i]);
    else
      return 2;
  }
  perf_check_sweep(begin, end, factor, iters, warmup);
  bagua_comm_t comm;
  PERF_OK(bagua_comm_init_from_env(&comm));
  int rank, size;
  PERF_OK(bagua_comm_rank(comm, &rank));
  PERF_OK(bagua_comm_size(comm, &size));
  bagua_topology_t ring, onepeer;
  PERF_OK(bagua_topology_create(comm, BAGUA_TOPO_RING, &ring));
  PERF_OK(bagua_topology_create(comm, BAGUA_TOPO_ONE_PEER_EXPONENTIAL, &onepeer));
  const char* names[] = {"allreduce", "gossip-ring", "gossip-onepeer"};
  if (rank == 0)
    std::printf(
        "# bagua_gossip_perf: %d ranks; time = median over %d steps of the slowest rank\n#%11s %16s %12s %14s\n", size,
        iters, "bytes", "variant", "time_ms", "sent_MiB/rank");
  for (size_t bytes = begin; bytes <= end; bytes *= factor) {
    size_t count = bytes / 4;
    std::vector<float> x(count, static_cast<float>(rank)), out(count);
    for (int v = 0; v < 3; ++v) {
      std::vector<double> times;
      uint64_t sent_before = 0;
      for (int it = 0; it < warmup + iters; ++it) {
        if (it == warmup) sent_before = perf_stats(comm).bytes_sent;
        PERF_OK(bagua_barrier(comm, nullptr));
        auto t0 = std::chrono::steady_clock::now();
        if (v == 0)
          PERF_OK(bagua_allreduce(x.data(), out.data(), count, BAGUA_FLOAT32, BAGUA_AVG, comm, nullptr));
        else
          PERF_OK(bagua_neighbor_allreduce(x.data(), out.data(), count, BAGUA_FLOAT32, v == 1 ? ring : onepeer, it,
                                           comm, nullptr));
        double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (it >= warmup) times.push_back(perf_max_over_ranks(t, comm));
      }
      // Traffic of the timed steps, less the barriers' and the timing allreduces' few bytes.
      double sent = perf_max_over_ranks(static_cast<double>(perf_stats(comm).bytes_sent - sent_before) / iters, comm);
      std::sort(times.begin(), times.end());
      if (rank == 0)
        std::printf("%12zu %16s %12.2f %14.2f\n", bytes, names[v], times[times.size() / 2] * 1e3, sent / (1 << 20));
      std::fflush(stdout);
    }
  }
  PERF_OK(bagua_topology_destroy(ring));
  PERF_OK(bagua_topology_destroy(onepeer));
  PERF_OK(bagua_comm_destroy(comm));
  return 0;
}

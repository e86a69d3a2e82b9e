// Quantized allreduce against full precision, under any launcher (bagua-run, the test bed):
//   bagua_quantized_perf [-b 4M] [-e 64M] [-f 4] [-n iters] [-w warmup] [--no-hier]
// One line per (size, variant): median time over iterations (each the slowest rank's), and the per-rank
// compute time (compress + decompress + owner step, from bagua_stats_t.compute_ns, the slowest rank's mean).
// Variants: full (bagua_allreduce, the library's own choice), minmax8/4/2 and sign, flat and, when hosts
// hold several ranks, hierarchical. Inputs are random floats; the output is checked identical on all ranks.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "perf/relaxation_perf.h"

namespace {

struct Variant {
  const char* name;
  int kind;  // -1: full precision
  int bits;
  int hierarchical;
};

uint64_t compute_ns(bagua_comm_t comm) { return perf_stats(comm).compute_ns; }

}  // namespace

int main(int argc, char** argv) {
  size_t begin = 4 << 20, end = 64 << 20, factor = 4;
  int iters = 5, warmup = 1;
  bool hier = true;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&] {
      return i + 1 < argc ? argv[++i] : (std::fprintf(stderr, "%s needs a value\n", a.c_str()), std::exit(2), nullptr);
    };
    if (a == "-b")
      begin = perf_parse_size(next());
    else if (a == "-e")
      end = perf_parse_size(next());
    else if (a == "-f")
      factor = std::strtoul(next(), nullptr, 10);
    else if (a == "-n")
      iters = std::atoi(next());
    else if (a == "-w")
      warmup = std::atoi(next());
    else if (a == "--no-hier")
      hier = false;
    else {
      std::fprintf(stderr, "usage: %s [-b bytes] [-e bytes] [-f factor] [-n iters] [-w warmup] [--no-hier]\n", argv[0]);
      return 2;
    }
  }
  perf_check_sweep(begin, end, factor, iters, warmup);
  bagua_comm_t comm;
  PERF_OK(bagua_comm_init_from_env(&comm));
  int rank, size, local_size;
  PERF_OK(bagua_comm_rank(comm, &rank));
  PERF_OK(bagua_comm_size(comm, &size));
  PERF_OK(bagua_comm_local_size(comm, &local_size));
  int max_local = static_cast<int>(perf_max_over_ranks(local_size, comm));
  bool shared_hosts = max_local > 1 && max_local < size;
  std::vector<Variant> variants = {{"full", -1, 0, 0}};
  for (int h = 0; h < (hier && shared_hosts ? 2 : 1); ++h) {
    int mode = h ? BAGUA_HIERARCHICAL_ON : BAGUA_HIERARCHICAL_OFF;
    variants.push_back({h ? "minmax8-hier" : "minmax8", BAGUA_COMPRESS_MINMAX, 8, mode});
    variants.push_back({h ? "minmax4-hier" : "minmax4", BAGUA_COMPRESS_MINMAX, 4, mode});
    variants.push_back({h ? "minmax2-hier" : "minmax2", BAGUA_COMPRESS_MINMAX, 2, mode});
    variants.push_back({h ? "sign1-hier" : "sign1", BAGUA_COMPRESS_SIGN, 1, mode});
  }
  if (rank == 0)
    std::printf(
        "# bagua_quantized_perf: %d ranks, at most %d per host; time = median over %d iterations of the "
        "slowest rank\n#%11s %14s %12s %12s %10s\n",
        size, max_local, iters, "bytes", "variant", "time_ms", "compute_ms", "identical");
  for (size_t bytes = begin; bytes <= end; bytes *= factor) {
    size_t count = bytes / 4;
    std::vector<float> input(count), out(count);
    std::mt19937 rng(17 + rank);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    for (float& v : input) v = dist(rng);
    for (const Variant& v : variants) {
      bagua_compression_t cfg = BAGUA_COMPRESSION_INITIALIZER;
      cfg.kind = v.kind < 0 ? BAGUA_COMPRESS_MINMAX : v.kind;
      cfg.bits = v.kind == BAGUA_COMPRESS_MINMAX ? v.bits : 8;
      cfg.chunk = 1024;
      cfg.hierarchical = v.hierarchical;
      std::vector<double> times;
      uint64_t compute_before = 0;
      for (int it = 0; it < warmup + iters; ++it) {
        if (it == warmup) compute_before = compute_ns(comm);
        PERF_OK(bagua_barrier(comm, nullptr));
        auto t0 = std::chrono::steady_clock::now();
        if (v.kind < 0)
          PERF_OK(bagua_allreduce(input.data(), out.data(), count, BAGUA_FLOAT32, BAGUA_SUM, comm, nullptr));
        else
          PERF_OK(bagua_quantized_allreduce(input.data(), out.data(), count, BAGUA_FLOAT32, BAGUA_SUM, &cfg, nullptr,
                                            comm, nullptr));
        double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (it >= warmup) times.push_back(perf_max_over_ranks(t, comm));
      }
      double compute = perf_max_over_ranks((compute_ns(comm) - compute_before) / 1e6 / iters, comm);
      std::sort(times.begin(), times.end());
      // Identical outputs: min and max of a checksum over ranks agree.
      uint64_t hash = 1469598103934665603ull;
      const auto* p = reinterpret_cast<const unsigned char*>(out.data());
      for (size_t i = 0; i < count * 4; i += 61) hash = (hash ^ p[i]) * 1099511628211ull;
      uint64_t lo = hash, hi = hash;
      PERF_OK(bagua_allreduce(&lo, &lo, 1, BAGUA_UINT64, BAGUA_MIN, comm, nullptr));
      PERF_OK(bagua_allreduce(&hi, &hi, 1, BAGUA_UINT64, BAGUA_MAX, comm, nullptr));
      if (rank == 0)
        std::printf("%12zu %14s %12.2f %12.2f %10s\n", bytes, v.name, times[times.size() / 2] * 1e3, compute,
                    lo == hi ? "yes" : "NO");
      std::fflush(stdout);
    }
  }
  PERF_OK(bagua_comm_destroy(comm));
  return 0;
}

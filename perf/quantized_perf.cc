// Quantized allreduce against full precision, under any launcher (bagua-run, the test bed):
//   bagua_quantized_perf [-b 4M] [-e 64M] [-f 4] [-n iters] [-w warmup] [--no-hier] [-M host|device]
// One line per (size, variant): median time over iterations (each the slowest rank's), and the per-rank
// compute time (compress + decompress + owner step, from bagua_stats_t.compute_ns, the slowest rank's mean).
// Variants: full (bagua_allreduce, the library's own choice), minmax8/4/2 and sign, flat and, when hosts
// hold several ranks, hierarchical. Inputs are random floats; the output is checked identical on all ranks.
// -M device: input and output in device memory, each call on a stream of the tool's and timed to its synchronize
// (BAGUA_DEVICE_STANDIN=1 runs it on the host stand-in). There compute is the kernels' time on the GPU's clock where
// they run on the caller's stream (BAGUA_DEVICE_TIMING=1, set here), else the time spent issuing them.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/device_runtime.h"
#include "perf/relaxation_perf.h"

namespace {

struct Variant {
  const char* name;
  int kind;  // -1: full precision
  int bits;
  int hierarchical;
};

uint64_t compute_ns(bagua_comm_t comm) { return perf_stats(comm).compute_ns; }

// The calls' buffers: host vectors, or device copies of them (-M device) used on `stream`.
struct Buffers {
  std::vector<float> input, out;
  float* device_input = nullptr;
  float* device_out = nullptr;
  void* stream = nullptr;
  Buffers(size_t count, bool on_device, void* s) : input(count), out(count), stream(s) {
    if (!on_device) return;
    device_input = static_cast<float*>(bagua::device_runtime().alloc_device(count * sizeof(float), 0));
    device_out = static_cast<float*>(bagua::device_runtime().alloc_device(count * sizeof(float), 0));
    if (device_input == nullptr || device_out == nullptr) {
      std::fprintf(stderr, "out of device memory (2 x %zu bytes)\n", count * sizeof(float));
      std::exit(1);
    }
  }
  Buffers(const Buffers&) = delete;
  Buffers& operator=(const Buffers&) = delete;
  ~Buffers() {
    if (device_input) bagua::device_runtime().free_device(device_input);
    if (device_out) bagua::device_runtime().free_device(device_out);
  }
  float* send() { return device_input ? device_input : input.data(); }
  float* recv() { return device_out ? device_out : out.data(); }
  void upload() {
    if (!device_input) return;
    bagua::device_runtime().copy_async(device_input, input.data(), input.size() * sizeof(float), stream);
    wait();
  }
  void download() {
    if (!device_out) return;
    bagua::device_runtime().copy_async(out.data(), device_out, out.size() * sizeof(float), stream);
    wait();
  }
  void wait() {
    if (device_input) bagua::device_runtime().synchronize(stream, 600000);
  }
};

}  // namespace

int main(int argc, char** argv) {
  size_t begin = 4 << 20, end = 64 << 20, factor = 4;
  int iters = 5, warmup = 1;
  bool hier = true, on_device = false;
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
    else if (a == "-M" && i + 1 < argc &&
             (std::strcmp(argv[i + 1], "host") == 0 || std::strcmp(argv[i + 1], "device") == 0))
      on_device = std::strcmp(argv[++i], "device") == 0;
    else {
      std::fprintf(stderr,
                   "usage: %s [-b bytes] [-e bytes] [-f factor] [-n iters] [-w warmup] [--no-hier] [-M host|device]\n",
                   argv[0]);
      return 2;
    }
  }
  perf_check_sweep(begin, end, factor, iters, warmup);
  void* stream = nullptr;
  if (on_device) {
    if (!bagua::device_runtime().usable()) {
      std::fprintf(stderr, "-M device: no CUDA device (BAGUA_DEVICE_STANDIN=1 runs the host stand-in)\n");
      return 77;
    }
    stream = bagua::device_runtime().create_stream(0);
    setenv("BAGUA_DEVICE_TIMING", "1", 0);  // compute_ms: the kernels' time on the GPU's clock (docs/cuda.md)
  }
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
        "# bagua_quantized_perf: %d ranks, at most %d per host, %s memory%s%s; time = median over %d iterations of "
        "the slowest rank\n#%11s %14s %12s %12s %10s\n",
        size, max_local, on_device ? "device" : "host", on_device ? ", runtime " : "",
        on_device ? bagua::device_runtime().name() : "", iters, "bytes", "variant", "time_ms", "compute_ms",
        "identical");
  for (size_t bytes = begin; bytes <= end; bytes *= factor) {
    size_t count = bytes / 4;
    Buffers buf(count, on_device, stream);
    std::mt19937 rng(17 + rank);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    for (float& v : buf.input) v = dist(rng);
    buf.upload();
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
          PERF_OK(bagua_allreduce(buf.send(), buf.recv(), count, BAGUA_FLOAT32, BAGUA_SUM, comm, stream));
        else
          PERF_OK(bagua_quantized_allreduce(buf.send(), buf.recv(), count, BAGUA_FLOAT32, BAGUA_SUM, &cfg, nullptr,
                                            comm, stream));
        buf.wait();
        double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (it >= warmup) times.push_back(perf_max_over_ranks(t, comm));
      }
      double compute = perf_max_over_ranks((compute_ns(comm) - compute_before) / 1e6 / iters, comm);
      std::sort(times.begin(), times.end());
      // Identical outputs: min and max of a checksum over ranks agree.
      buf.download();
      uint64_t hash = 1469598103934665603ull;
      const auto* p = reinterpret_cast<const unsigned char*>(buf.out.data());
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
  if (stream) bagua::device_runtime().destroy_stream(stream);
  return 0;
}

// bagua_kernels_perf: CPU kernel throughput on one core. One row per kernel and size:
//   kernel, bytes (input), GB/s (bytes read + written per second), pct_of_copy (that traffic over a memcpy of
//   the same input measured in the same run).
//   bagua_kernels_perf [-b minbytes] [-e maxbytes] [-n iterations]
#include <getopt.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/reduce.h"
#include "kernels/quantize.h"

using namespace bagua;

namespace {

double median_seconds(int iterations, const std::function<void()>& body) {
  body();  // warm up (page faults, caches)
  std::vector<double> times;
  for (int i = 0; i < iterations; ++i) {
    auto start = std::chrono::steady_clock::now();
    body();
    times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  size_t min_bytes = 1 << 20, max_bytes = 64 << 20;
  int iterations = 5;
  int c;
  while ((c = getopt(argc, argv, "b:e:n:")) != -1) {
    if (c == 'b')
      min_bytes = std::strtoull(optarg, nullptr, 10);
    else if (c == 'e')
      max_bytes = std::strtoull(optarg, nullptr, 10);
    else if (c == 'n')
      iterations = std::atoi(optarg);
    else {
      std::fprintf(stderr, "usage: bagua_kernels_perf [-b minbytes] [-e maxbytes] [-n iterations]\n");
      return 2;
    }
  }
  std::printf("# CPU kernels (reductions: %s), one core; GB/s = (bytes read + written) / s\n",
              cpu_kernels_name(cpu_kernels()));
  std::printf("%-26s %12s %9s %12s\n", "kernel", "bytes", "GB/s", "pct_of_copy");
  for (size_t bytes = min_bytes; bytes <= max_bytes; bytes *= 4) {
    size_t n = bytes / sizeof(float);
    std::vector<float> x(n), y(n), acc(n, 0.0f);
    std::mt19937 rng(1);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    for (auto& v : x) v = dist(rng);
    std::vector<float> copy_dst(n);
    double copy_s = median_seconds(iterations, [&] { std::memcpy(copy_dst.data(), x.data(), bytes); });
    double copy_gbps = 2.0 * bytes / copy_s / 1e9;
    auto row = [&](const std::string& name, double traffic, double seconds) {
      double gbps = traffic / seconds / 1e9;
      std::printf("%-26s %12zu %9.2f %11.0f%%\n", name.c_str(), bytes, gbps, 100.0 * gbps / copy_gbps);
    };
    row("memcpy", 2.0 * bytes, copy_s);
    double s =
        median_seconds(iterations, [&] { reduce_from(y.data(), x.data(), acc.data(), n, BAGUA_FLOAT32, BAGUA_SUM); });
    row("reduce_sum_f32", 3.0 * bytes, s);
    {
      std::vector<float> error(n, 0.0f);
      std::vector<uint8_t> q(sign_compressed_bytes(n, 1024));
      double es = median_seconds(iterations, [&] { sign_compress(x.data(), n, 1024, error.data(), q.data()); });
      row("sign_ef", static_cast<double>(3 * bytes + q.size()), es);  // reads x and e, writes e and the bits
    }
    for (int bits : {8, 4, 2, 1}) {
      MinMaxFormat f{bits, 1024};
      std::vector<uint8_t> q(minmax_compressed_bytes(n, f));
      double qs =
          median_seconds(iterations, [&] { minmax_compress(x.data(), BAGUA_FLOAT32, n, f, RoundingKey{}, q.data()); });
      row("quantize_minmax" + std::to_string(bits), static_cast<double>(bytes + q.size()), qs);
      RoundingKey stochastic{true, 7, 1, 0, 0};
      double ss =
          median_seconds(iterations, [&] { minmax_compress(x.data(), BAGUA_FLOAT32, n, f, stochastic, q.data()); });
      row("quantize_stochastic_minmax" + std::to_string(bits), static_cast<double>(bytes + q.size()), ss);
      double ds = median_seconds(iterations, [&] { minmax_decompress_accumulate(q.data(), n, f, acc.data()); });
      row("dequantize_acc_minmax" + std::to_string(bits), static_cast<double>(q.size() + 2 * bytes), ds);
    }
  }
  return 0;
}

// bagua_kernels_perf: CPU kernel throughput on one core. One row per kernel and size:
//   kernel, bytes (input), GB/s (bytes read + written per second), pct_of_copy (that traffic over a memcpy of
//   the same input, timed in alternation with the kernel: the machine's noise then moves both alike).
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

double seconds(const std::function<void()>& body) {
  auto start = std::chrono::steady_clock::now();
  body();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct Timing {
  double body_s;  // median time of the body
  double copy_s;  // median time of the memcpy timed between its runs
};

// The body and the reference memcpy, alternately (each warmed up once: page faults, caches).
Timing median_seconds(int iterations, const std::function<void()>& body, const std::function<void()>& copy) {
  body();
  copy();
  std::vector<double> body_times, copy_times;
  for (int i = 0; i < iterations; ++i) {
    copy_times.push_back(seconds(copy));
    body_times.push_back(seconds(body));
  }
  return {median(body_times), median(copy_times)};
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
    auto copy = [&] { std::memcpy(copy_dst.data(), x.data(), bytes); };
    auto row = [&](const std::string& name, double traffic, Timing t) {
      double gbps = traffic / t.body_s / 1e9, copy_gbps = 2.0 * bytes / t.copy_s / 1e9;
      std::printf("%-26s %12zu %9.2f %11.0f%%\n", name.c_str(), bytes, gbps, 100.0 * gbps / copy_gbps);
    };
    row("memcpy", 2.0 * bytes, median_seconds(iterations, copy, copy));
    row("reduce_sum_f32", 3.0 * bytes,
        median_seconds(
            iterations, [&] { reduce_from(y.data(), x.data(), acc.data(), n, BAGUA_FLOAT32, BAGUA_SUM); }, copy));
    {
      std::vector<float> error(n, 0.0f);
      std::vector<uint8_t> q(sign_compressed_bytes(n, 1024));
      Timing es = median_seconds(
          iterations, [&] { sign_compress(x.data(), n, 1024, error.data(), q.data()); }, copy);
      row("sign_ef", static_cast<double>(3 * bytes + q.size()), es);  // reads x and e, writes e and the bits
    }
    for (int bits : {8, 4, 2, 1}) {
      MinMaxFormat f{bits, 1024};
      std::vector<uint8_t> q(minmax_compressed_bytes(n, f));
      Timing qs = median_seconds(
          iterations, [&] { minmax_compress(x.data(), BAGUA_FLOAT32, n, f, RoundingKey{}, q.data()); }, copy);
      row("quantize_minmax" + std::to_string(bits), static_cast<double>(bytes + q.size()), qs);
      RoundingKey stochastic{true, 7, 1, 0, 0};
      Timing ss = median_seconds(
          iterations, [&] { minmax_compress(x.data(), BAGUA_FLOAT32, n, f, stochastic, q.data()); }, copy);
      row("quantize_stochastic_minmax" + std::to_string(bits), static_cast<double>(bytes + q.size()), ss);
      Timing ds = median_seconds(
          iterations, [&] { minmax_decompress_accumulate(q.data(), n, f, acc.data()); }, copy);
      row("dequantize_acc_minmax" + std::to_string(bits), static_cast<double>(q.size() + 2 * bytes), ds);
    }
  }
  return 0;
}

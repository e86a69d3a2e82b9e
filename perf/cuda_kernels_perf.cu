// bagua_cuda_kernels_perf: CUDA kernel throughput on device 0. One row per kernel and size:
//   kernel, bytes (input), GB/s (bytes read + written per second), pct_of_copy (that traffic over a
//   device-to-device copy of the same input in the same run). Exits 77 without a device.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "kernels/cuda/cuda_kernels.h"
#include "kernels/quantize.h"

using namespace bagua;

namespace {
double median_ms(int iterations, const std::function<void()>& body) {
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  body();
  std::vector<float> times;
  for (int i = 0; i < iterations; ++i) {
    cudaEventRecord(start);
    body();
    cudaEventRecord(stop);
    cudaEventSynchronize(stop);
    float ms = 0;
    cudaEventElapsedTime(&ms, start, stop);
    times.push_back(ms);
  }
  std::sort(times.begin(), times.end());
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return times[times.size() / 2];
}
}  // namespace

int main() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("no CUDA device: skipped\n");
    return 77;
  }
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  std::printf("# CUDA kernels on %s; GB/s = (bytes read + written) / s\n", prop.name);
  std::printf("%-26s %12s %9s %12s\n", "kernel", "bytes", "GB/s", "pct_of_copy");
  for (size_t bytes = 1 << 20; bytes <= (size_t(256) << 20); bytes *= 4) {
    size_t n = bytes / sizeof(float);
    float *x, *y, *acc;
    cudaMalloc(&x, bytes);
    cudaMalloc(&y, bytes);
    cudaMalloc(&acc, bytes);
    cudaMemset(x, 0x3f, bytes);
    cudaMemset(acc, 0, bytes);
    double copy_ms = median_ms(10, [&] { cudaMemcpyAsync(y, x, bytes, cudaMemcpyDeviceToDevice); });
    double copy_gbps = 2.0 * bytes / (copy_ms / 1e3) / 1e9;
    auto row = [&](const std::string& name, double traffic, double ms) {
      double gbps = traffic / (ms / 1e3) / 1e9;
      std::printf("%-26s %12zu %9.1f %11.0f%%\n", name.c_str(), bytes, gbps, 100.0 * gbps / copy_gbps);
    };
    row("memcpy_d2d", 2.0 * bytes, copy_ms);
    row("reduce_sum_f32", 3.0 * bytes,
        median_ms(10, [&] { cuda::reduce_from(y, x, acc, n, BAGUA_FLOAT32, BAGUA_SUM, nullptr); }));
    for (int bits : {8, 4, 1}) {
      MinMaxFormat f{bits, 1024};
      size_t qbytes = minmax_compressed_bytes(n, f);
      uint8_t* q;
      cudaMalloc(&q, qbytes);
      row("quantize_minmax" + std::to_string(bits), static_cast<double>(bytes + qbytes),
          median_ms(10, [&] { cuda::minmax_compress(x, n, f, RoundingKey{}, q, nullptr); }));
      row("dequantize_acc_minmax" + std::to_string(bits), static_cast<double>(qbytes + 2 * bytes),
          median_ms(10, [&] { cuda::minmax_decompress_accumulate(q, n, f, acc, nullptr); }));
      cudaFree(q);
    }
    cudaFree(x);
    cudaFree(y);
    cudaFree(acc);
  }
  return 0;
}

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

// Values spread over [-2, 2): a hash of the index, so every chunk has a real range and codes vary.
__global__ void fill_kernel(float* x, size_t n, uint32_t salt) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    uint32_t h = static_cast<uint32_t>(i) * 0x9e3779b1u + salt;
    h ^= h >> 15;
    h *= 0x2c1b3c6du;
    h ^= h >> 12;
    x[i] = static_cast<float>(h >> 8) * (4.0f / 16777216.0f) - 2.0f;
  }
}

void fill(float* x, size_t n, uint32_t salt) {
  fill_kernel<<<1024, 256>>>(x, n, salt);
  cudaDeviceSynchronize();
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
    const size_t n = bytes / sizeof(float);
    const double fbytes = static_cast<double>(bytes);
    float *x, *y, *acc, *err;
    cudaMalloc(&x, bytes);
    cudaMalloc(&y, bytes);
    cudaMalloc(&acc, bytes);
    cudaMalloc(&err, bytes);
    fill(x, n, 1);
    fill(acc, n, 2);
    cudaMemset(err, 0, bytes);
    double copy_ms = median_ms(10, [&] { cudaMemcpyAsync(y, x, bytes, cudaMemcpyDeviceToDevice); });
    double copy_gbps = 2.0 * fbytes / (copy_ms / 1e3) / 1e9;
    auto row = [&](const std::string& name, double traffic, double ms) {
      double gbps = traffic / (ms / 1e3) / 1e9;
      std::printf("%-26s %12zu %9.1f %11.0f%%\n", name.c_str(), bytes, gbps, 100.0 * gbps / copy_gbps);
    };
    row("memcpy_d2d", 2.0 * fbytes, copy_ms);
    row("reduce_sum_f32", 3.0 * fbytes,
        median_ms(10, [&] { cuda::reduce_from(y, x, acc, n, BAGUA_FLOAT32, BAGUA_SUM, nullptr); }));
    {  // the IPC path's owner step on 4 ranks: 4 blocks in, 4 outputs (a separate buffer each)
      float* bufs[7];
      for (auto& b : bufs) {
        cudaMalloc(&b, bytes);
        fill(b, n, 3);
      }
      std::vector<void*> dsts = {bufs[0], bufs[4], bufs[5], bufs[6]};
      std::vector<const void*> srcs = {bufs[0], bufs[1], bufs[2], bufs[3]};
      row("reduce_spans_f32_4x4", 8 * fbytes, median_ms(10, [&] {
            cuda::reduce_spans(dsts.data(), 4, srcs.data(), 4, n, BAGUA_FLOAT32, BAGUA_SUM, 0, nullptr);
          }));
      for (auto& b : bufs) cudaFree(b);
    }
    for (int bits : {8, 4, 2, 1}) {
      const MinMaxFormat f{bits, 1024};
      const std::string b = std::to_string(bits);
      const double qbytes = static_cast<double>(minmax_compressed_bytes(n, f));
      uint8_t *q, *peers[3];
      cudaMalloc(&q, minmax_compressed_bytes(n, f));
      row("quantize_minmax" + b, fbytes + qbytes,
          median_ms(10, [&] { cuda::minmax_compress(x, n, f, RoundingKey{}, q, nullptr); }));
      const RoundingKey stochastic{true, 7, 1, 0, 0};
      row("quantize_stochastic_minmax" + b, fbytes + qbytes,
          median_ms(10, [&] { cuda::minmax_compress(x, n, f, stochastic, q, nullptr); }));
      row("dequantize_acc_minmax" + b, qbytes + 2 * fbytes,
          median_ms(10, [&] { cuda::minmax_decompress_accumulate(q, n, f, acc, nullptr); }));
      if (bits == 8) {  // error feedback, and the owner step over three peers' blocks (the allreduce's on 4 ranks)
        row("quantize_ef_minmax8", 3 * fbytes + qbytes, median_ms(10, [&] {
              cuda::minmax_compress_typed(x, BAGUA_FLOAT32, n, err, f, RoundingKey{}, q, nullptr);
            }));
        for (auto& p : peers) {
          cudaMalloc(&p, minmax_compressed_bytes(n, f));
          cuda::minmax_compress(acc, n, f, RoundingKey{}, p, nullptr);
        }
        const uint8_t* inputs[3] = {peers[0], peers[1], peers[2]};
        row("owner_step_ef_minmax8_3", 3 * fbytes + 4 * qbytes, median_ms(10, [&] {
              cuda::minmax_reduce_recompress(inputs, 3, x, n, f, RoundingKey{}, err, q, nullptr, y, nullptr);
            }));
        for (auto& p : peers) cudaFree(p);
      }
      cudaFree(q);
    }
    for (size_t chunk : {size_t(1024), size_t(4096)}) {  // sign's scale is a serial sum over the chunk
      const std::string c = std::to_string(chunk);
      const double sbytes = static_cast<double>(sign_compressed_bytes(n, chunk));
      uint8_t* sq;
      cudaMalloc(&sq, sign_compressed_bytes(n, chunk));
      row("sign_ef_" + c, 3 * fbytes + sbytes,
          median_ms(10, [&] { cuda::sign_compress(x, n, chunk, err, sq, nullptr); }));
      const CompressionSpec sign{BAGUA_COMPRESS_SIGN, {8, chunk}};
      row("dequantize_acc_sign_" + c, sbytes + 2 * fbytes,
          median_ms(10, [&] { cuda::decompress_floats(sign, sq, n, acc, true, nullptr); }));
      cudaFree(sq);
    }
    cudaFree(x);
    cudaFree(y);
    cudaFree(acc);
    cudaFree(err);
  }
  return 0;
}

// CUDA kernels against the CPU reference, bit for bit: reductions for every datatype and op (random bit
// patterns, so NaN, Inf and subnormals too), averages, min-max codes with nearest and stochastic rounding
// (same key), and decompress-accumulate. Exits 77 (skipped) without a CUDA device.
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cpu/reduce.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/dtype.h"
#include "kernels/quantize.h"

using namespace bagua;

namespace {
int g_failures = 0;
#define EXPECT(cond, ...)                    \
  do {                                       \
    if (!(cond)) {                           \
      std::printf("FAIL: " __VA_ARGS__);     \
      std::printf("\n");                     \
      ++g_failures;                          \
    }                                        \
  } while (0)

template <typename T>
T* to_device(const std::vector<T>& host) {
  T* dev = nullptr;
  cudaMalloc(&dev, host.size() * sizeof(T) + 1);
  cudaMemcpy(dev, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice);
  return dev;
}

template <typename T>
std::vector<T> to_host(const T* dev, size_t n) {
  std::vector<T> host(n);
  cudaMemcpy(host.data(), dev, n * sizeof(T), cudaMemcpyDeviceToHost);
  return host;
}

void reductions() {
  std::mt19937_64 rng(7);
  const size_t count = 100003;
  for (int t = 0; t < kNumDatatypes; ++t) {
    auto dtype = static_cast<bagua_datatype_t>(t);
    size_t bytes = count * datatype_size(dtype);
    std::vector<uint8_t> a(bytes), b(bytes);
    for (auto& x : a) x = static_cast<uint8_t>(rng());
    for (auto& x : b) x = static_cast<uint8_t>(rng());
    uint8_t* da = to_device(a);
    uint8_t* db = to_device(b);
    uint8_t* dd = to_device(std::vector<uint8_t>(bytes));
    for (int o = 0; o < kNumRedops; ++o) {
      auto op = static_cast<bagua_redop_t>(o);
      std::vector<uint8_t> want(bytes);
      reduce_from_with(CpuKernels::kScalar, want.data(), a.data(), b.data(), count, dtype, op);
      cuda::reduce_from(dd, da, db, count, dtype, op, nullptr);
      cuda::synchronize(nullptr);
      EXPECT(to_host(dd, bytes) == want, "reduction %s %s differs from the CPU", datatype_name(dtype), redop_name(op));
    }
    std::vector<uint8_t> want = a;
    divide_by_with(CpuKernels::kScalar, want.data(), count, dtype, 3);
    cuda::divide_by(da, count, dtype, 3, nullptr);
    cuda::synchronize(nullptr);
    EXPECT(to_host(da, bytes) == want, "average %s differs from the CPU", datatype_name(dtype));
    cudaFree(da);
    cudaFree(db);
    cudaFree(dd);
  }
}

void quantization() {
  std::mt19937 rng(3);
  std::normal_distribution<float> dist(0.0f, 2.0f);
  const size_t count = 123457;
  std::vector<float> x(count);
  for (auto& v : x) v = dist(rng);
  x[5000] = std::numeric_limits<float>::infinity();  // one poisoned chunk
  float* dx = to_device(x);
  for (int bits : {1, 2, 4, 8})
    for (size_t chunk : {size_t(256), size_t(1024), size_t(4096)})
      for (bool stochastic : {false, true}) {
        MinMaxFormat f{bits, chunk};
        RoundingKey key{stochastic, 99, 5, 2, 1000};
        size_t bytes = minmax_compressed_bytes(count, f);
        std::vector<uint8_t> want(bytes);
        minmax_compress(x.data(), BAGUA_FLOAT32, count, f, key, want.data());
        uint8_t* dq = to_device(std::vector<uint8_t>(bytes, 0xAB));
        cuda::minmax_compress(dx, count, f, key, dq, nullptr);
        cuda::synchronize(nullptr);
        EXPECT(to_host(dq, bytes) == want, "min-max codes bits %d chunk %zu stochastic %d differ", bits, chunk,
               stochastic ? 1 : 0);
        std::vector<float> acc(count, 0.5f);
        minmax_decompress_accumulate(want.data(), count, f, acc.data());
        float* dacc = to_device(std::vector<float>(count, 0.5f));
        cuda::minmax_decompress_accumulate(dq, count, f, dacc, nullptr);
        cuda::synchronize(nullptr);
        std::vector<float> got = to_host(dacc, count);
        EXPECT(std::memcmp(got.data(), acc.data(), count * sizeof(float)) == 0,
               "decompress-accumulate bits %d chunk %zu differs", bits, chunk);
        cudaFree(dq);
        cudaFree(dacc);
      }
  cudaFree(dx);
}
}  // namespace

int main() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("no CUDA device: skipped\n");
    return 77;
  }
  reductions();
  quantization();
  std::printf("%s\n", g_failures ? "CUDA kernels: FAILED" : "CUDA kernels match the CPU bit for bit");
  return g_failures ? 1 : 0;
}

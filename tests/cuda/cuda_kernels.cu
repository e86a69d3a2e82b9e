// CUDA kernels against the CPU reference, bit for bit: reductions for every datatype and op (random bit
// patterns, so NaN, Inf and subnormals too), averages, min-max codes with nearest and stochastic rounding
// (same key), decompress-accumulate, the quantized allreduce's wire formats, the averaging correction and the gossip
// difference. Exits 77 (skipped) without a CUDA device.
#include <cuda_runtime_api.h>

#include <cmath>
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
#define EXPECT(cond, ...)                \
  do {                                   \
    if (!(cond)) {                       \
      std::printf("FAIL: " __VA_ARGS__); \
      std::printf("\n");                 \
      ++g_failures;                      \
    }                                    \
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
// Everything else against the CPU: typed input with error feedback, decompress to each type, the fused owner
// step, sign with error feedback, casts, BAGUA's MinMaxUInt8.
void other_kernels() {
  std::mt19937 rng(5);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  const size_t n = 70001;
  std::vector<float> x(n), err(n);
  for (auto& v : x) v = dist(rng);
  for (auto& v : err) v = dist(rng) * 0.01f;
  MinMaxFormat f{4, 1024};
  RoundingKey key{true, 3, 9, 1, 0};
  size_t qbytes = minmax_compressed_bytes(n, f);
  for (bagua_datatype_t t : {BAGUA_FLOAT32, BAGUA_FLOAT16, BAGUA_BFLOAT16}) {
    std::vector<uint8_t> in_bytes(n * datatype_size(t));
    if (t == BAGUA_FLOAT32)
      std::memcpy(in_bytes.data(), x.data(), n * 4);
    else
      cast_from_float(x.data(), n, in_bytes.data(), t);
    std::vector<float> cpu_err = err;
    std::vector<uint8_t> want(qbytes);
    minmax_compress_ef(in_bytes.data(), t, n, cpu_err.data(), f, key, want.data());
    uint8_t* din = to_device(in_bytes);
    float* derr = to_device(err);
    uint8_t* dq = to_device(std::vector<uint8_t>(qbytes));
    cuda::minmax_compress_typed(din, t, n, derr, f, key, dq, nullptr);
    cuda::synchronize(nullptr);
    EXPECT(to_host(dq, qbytes) == want, "compress with error feedback, %s input, differs", datatype_name(t));
    EXPECT(to_host(derr, n) == cpu_err, "error feedback state, %s input, differs", datatype_name(t));
    std::vector<uint8_t> out_want(n * datatype_size(t));
    minmax_decompress(want.data(), n, f, out_want.data(), t);
    uint8_t* dout = to_device(std::vector<uint8_t>(out_want.size()));
    cuda::minmax_decompress(dq, n, f, dout, t, nullptr);
    cuda::synchronize(nullptr);
    EXPECT(to_host(dout, out_want.size()) == out_want, "decompress to %s differs", datatype_name(t));
    cudaFree(din);
    cudaFree(derr);
    cudaFree(dq);
    cudaFree(dout);
  }
  {  // fused owner step with the owner's error feedback
    std::vector<std::vector<uint8_t>> peers(2, std::vector<uint8_t>(qbytes));
    for (auto& p : peers) {
      for (auto& v : x) v = dist(rng);
      minmax_compress(x.data(), BAGUA_FLOAT32, n, f, RoundingKey{}, p.data());
    }
    std::vector<float> own(n);
    for (auto& v : own) v = dist(rng);
    std::vector<float> e_cpu = err, red_cpu(n);
    std::vector<uint8_t> want(qbytes);
    const uint8_t* in_cpu[2] = {peers[0].data(), peers[1].data()};
    minmax_reduce_recompress(in_cpu, 2, own.data(), n, f, key, e_cpu.data(), want.data(), red_cpu.data());
    uint8_t* d0 = to_device(peers[0]);
    uint8_t* d1 = to_device(peers[1]);
    const uint8_t* in_gpu[2] = {d0, d1};
    float* down = to_device(own);
    float* de = to_device(err);
    float* dred = to_device(std::vector<float>(n));
    float* dscratch = to_device(std::vector<float>(n));
    uint8_t* dq = to_device(std::vector<uint8_t>(qbytes));
    cuda::minmax_reduce_recompress(in_gpu, 2, down, n, f, key, de, dq, dred, dscratch, nullptr);
    cuda::synchronize(nullptr);
    EXPECT(to_host(dq, qbytes) == want, "fused owner step codes differ");
    EXPECT(to_host(dred, n) == red_cpu, "fused owner step sums differ");
    EXPECT(to_host(de, n) == e_cpu, "fused owner step error differs");
    for (void* p : {static_cast<void*>(d0), static_cast<void*>(d1), static_cast<void*>(down), static_cast<void*>(de),
                    static_cast<void*>(dred), static_cast<void*>(dscratch), static_cast<void*>(dq)})
      cudaFree(p);
  }
  {  // sign with error feedback
    const size_t chunk = 1000;
    size_t sbytes = sign_compressed_bytes(n, chunk);
    std::vector<float> e_cpu = err;
    std::vector<uint8_t> want(sbytes);
    sign_compress(x.data(), n, chunk, e_cpu.data(), want.data());
    float* dx = to_device(x);
    float* de = to_device(err);
    uint8_t* dq = to_device(std::vector<uint8_t>(sbytes));
    cuda::sign_compress(dx, n, chunk, de, dq, nullptr);
    cuda::synchronize(nullptr);
    EXPECT(to_host(dq, sbytes) == want, "sign codes differ");
    EXPECT(to_host(de, n) == e_cpu, "sign error feedback differs");
    std::vector<float> dec(n);
    sign_decompress(want.data(), n, chunk, dec.data());
    cuda::sign_decompress(dq, n, chunk, dx, nullptr);
    cuda::synchronize(nullptr);
    EXPECT(to_host(dx, n) == dec, "sign decompress differs");
    cudaFree(dx);
    cudaFree(de);
    cudaFree(dq);
  }
  {  // casts and BAGUA's layout
    float* dx = to_device(x);
    uint16_t* dh = to_device(std::vector<uint16_t>(n));
    for (bagua_datatype_t t : {BAGUA_FLOAT16, BAGUA_BFLOAT16}) {
      std::vector<uint16_t> want(n);
      cast_from_float(x.data(), n, want.data(), t);
      cuda::cast_from_float(dx, n, dh, t, nullptr);
      cuda::synchronize(nullptr);
      EXPECT(to_host(dh, n) == want, "cast to %s differs", datatype_name(t));
    }
    size_t ubytes = bagua_u8_compressed_bytes(n);
    std::vector<uint8_t> want(ubytes);
    bagua_u8_compress(x.data(), n, want.data());
    uint8_t* dq = to_device(std::vector<uint8_t>(ubytes, 0xAB));
    cuda::bagua_u8_compress(dx, n, dq, nullptr);
    cuda::synchronize(nullptr);
    EXPECT(to_host(dq, ubytes) == want, "MinMaxUInt8 bytes differ");
    cudaFree(dx);
    cudaFree(dh);
    cudaFree(dq);
  }
}

// The quantized allreduce's wire formats as the device path runs them (cuda::compress_floats and
// decompress_floats against kernels/quantize.h's CompressionSpec functions): codes, error feedback, decompress and
// decompress-accumulate, with an Inf, a NaN and a large value among the inputs.
void wire_formats() {
  std::mt19937 rng(11);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  const size_t n = 50003;
  std::vector<float> x(n), err(n), acc(n);
  for (auto& v : x) v = dist(rng);
  for (auto& v : err) v = dist(rng) * 0.01f;
  for (auto& v : acc) v = dist(rng);
  x[7] = INFINITY;
  x[3000] = NAN;
  x[40000] = 70000.0f;  // beyond fp16's range
  const CompressionSpec specs[] = {{BAGUA_COMPRESS_MINMAX, {8, 512}},  {BAGUA_COMPRESS_MINMAX, {4, 256}},
                                   {BAGUA_COMPRESS_MINMAX, {2, 1024}}, {BAGUA_COMPRESS_MINMAX, {1, 4096}},
                                   {BAGUA_COMPRESS_SIGN, {8, 1024}},   {BAGUA_COMPRESS_FP16, {8, 1024}},
                                   {BAGUA_COMPRESS_BF16, {8, 1024}}};
  for (const CompressionSpec& spec : specs) {
    for (int feedback = 0; feedback < 2; ++feedback) {
      const size_t bytes = compressed_bytes(spec, n);
      const RoundingKey key{spec.kind == BAGUA_COMPRESS_MINMAX && feedback == 1, 5, 2, 1, 100};
      std::vector<float> cpu_err = err;
      std::vector<uint8_t> want(bytes);
      compress_floats(spec, x.data(), n, feedback ? cpu_err.data() : nullptr, key, want.data());
      float* dx = to_device(x);
      float* de = to_device(err);
      uint8_t* dq = to_device(std::vector<uint8_t>(bytes, 0xCD));
      cuda::compress_floats(spec, dx, n, feedback ? de : nullptr, key, dq, nullptr);
      cuda::synchronize(nullptr);
      EXPECT(to_host(dq, bytes) == want, "wire format %d bits %d: codes differ", spec.kind, spec.format.bits);
      if (feedback) {
        std::vector<float> got = to_host(de, n);
        EXPECT(std::memcmp(got.data(), cpu_err.data(), n * 4) == 0, "wire format %d bits %d: error feedback differs",
               spec.kind, spec.format.bits);
      }
      std::vector<float> dec(n), dec_acc = acc;
      decompress_floats(spec, want.data(), n, dec.data());
      decompress_accumulate_floats(spec, want.data(), n, dec_acc.data());
      float* dacc = to_device(acc);
      cuda::decompress_floats(spec, dq, n, dx, false, nullptr);
      cuda::decompress_floats(spec, dq, n, dacc, true, nullptr);
      cuda::synchronize(nullptr);
      std::vector<float> got = to_host(dx, n), got_acc = to_host(dacc, n);
      EXPECT(std::memcmp(got.data(), dec.data(), n * 4) == 0, "wire format %d bits %d: decompress differs", spec.kind,
             spec.format.bits);
      EXPECT(std::memcmp(got_acc.data(), dec_acc.data(), n * 4) == 0,
             "wire format %d bits %d: decompress-accumulate differs", spec.kind, spec.format.bits);
      cudaFree(dx);
      cudaFree(de);
      cudaFree(dq);
      cudaFree(dacc);
    }
  }
}

// Asynchronous averaging's correction x + (sum / n - snapshot), float and double, NaN and Inf among the inputs.
void averaging() {
  std::mt19937 rng(13);
  std::normal_distribution<double> dist(0.0, 10.0);
  const size_t n = 30001;
  auto check = [&](auto zero) {
    using T = decltype(zero);
    const bagua_datatype_t dtype = sizeof(T) == 4 ? BAGUA_FLOAT32 : BAGUA_FLOAT64;
    std::vector<T> x(n), sum(n), snapshot(n);
    for (size_t i = 0; i < n; ++i) {
      x[i] = static_cast<T>(dist(rng));
      sum[i] = static_cast<T>(dist(rng));
      snapshot[i] = static_cast<T>(dist(rng));
    }
    x[5] = static_cast<T>(INFINITY);
    sum[6] = static_cast<T>(NAN);
    snapshot[7] = -static_cast<T>(INFINITY);
    T* dx = to_device(x);
    T* dsum = to_device(sum);
    T* dsnap = to_device(snapshot);
    average_correct(x.data(), sum.data(), snapshot.data(), n, dtype, 3);
    cuda::average_correct(dx, dsum, dsnap, n, dtype, 3, nullptr);
    cuda::synchronize(nullptr);
    std::vector<T> got = to_host(dx, n);
    EXPECT(std::memcmp(got.data(), x.data(), n * sizeof(T)) == 0, "averaging correction differs (%s)",
           datatype_name(dtype));
    cudaFree(dx);
    cudaFree(dsum);
    cudaFree(dsnap);
  };
  check(0.0f);
  check(0.0);
}

// Low-precision decentralized SGD's difference with two replicas (a ring's weights, 1/3 each).
void gossip() {
  std::mt19937 rng(17);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  const size_t n = 40001;
  std::vector<float> x(n), self(n), left(n), right(n), want(n);
  for (size_t i = 0; i < n; ++i) x[i] = dist(rng), self[i] = dist(rng), left[i] = dist(rng), right[i] = dist(rng);
  x[3] = NAN;
  self[4] = INFINITY;
  left[5] = -INFINITY;
  right[5] = INFINITY;
  const float weights[2] = {1.0f / 3, 1.0f / 3};
  const float* replicas[2] = {left.data(), right.data()};
  gossip_difference(want.data(), x.data(), self.data(), replicas, weights, 2, 1.0f / 3, n);
  float* dx = to_device(x);
  float* dself = to_device(self);
  float* dleft = to_device(left);
  float* dright = to_device(right);
  float* ddiff = to_device(std::vector<float>(n));
  const float* dreplicas[2] = {dleft, dright};
  cuda::gossip_difference(ddiff, dx, dself, dreplicas, weights, 2, 1.0f / 3, n, nullptr);
  cuda::synchronize(nullptr);
  std::vector<float> got = to_host(ddiff, n);
  EXPECT(std::memcmp(got.data(), want.data(), n * 4) == 0, "gossip difference differs");
  for (float* p : {dx, dself, dleft, dright, ddiff}) cudaFree(p);
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
  other_kernels();
  wire_formats();
  averaging();
  gossip();
  std::printf("%s\n", g_failures ? "CUDA kernels: FAILED" : "CUDA kernels match the CPU bit for bit");
  return g_failures ? 1 : 0;
}

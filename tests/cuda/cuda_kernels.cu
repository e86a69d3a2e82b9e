// CUDA kernels against the CPU reference, bit for bit: reductions for every datatype and op (random bit
// patterns, so NaN, Inf and subnormals too), averages (by rank counts that overflow int8/uint8 too), the one-pass
// reduction of many spans, min-max codes with nearest and stochastic rounding (same key), decompress-accumulate, a
// header with only its max NaN, the quantized allreduce's wire formats, BAGUA's MinMaxUInt8 (constant, signed-zero
// and NaN inputs), the averaging correction, the gossip difference and the copy kernel. Exits 77 (skipped) without
// a CUDA device.
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
    // Rank counts that do not fit a narrow integer type (200 and 256 for int8 and uint8) as well as 3.
    for (int divisor : {3, 200, 256}) {
      std::vector<uint8_t> want = a;
      divide_by_with(CpuKernels::kScalar, want.data(), count, dtype, divisor);
      cudaMemcpy(da, a.data(), bytes, cudaMemcpyHostToDevice);
      cuda::divide_by(da, count, dtype, divisor, nullptr);
      cuda::synchronize(nullptr);
      EXPECT(to_host(da, bytes) == want, "average %s by %d differs from the CPU", datatype_name(dtype), divisor);
    }
    cudaFree(da);
    cudaFree(db);
    cudaFree(dd);
  }
}

// The library's copies by kernel (cuda::copy_bytes): every word size's path, offsets and lengths off alignment.
void copies() {
  const size_t n = 70001;
  std::vector<uint8_t> src(n);
  for (size_t i = 0; i < n; ++i) src[i] = static_cast<uint8_t>(i * 131 + 7);
  uint8_t* dsrc = to_device(src);
  const size_t cases[][3] = {{0, 0, n - 16}, {3, 3, 50001}, {4, 8, 40003}, {1, 2, 4099},
                             {5, 0, 17},     {0, 0, 1},     {7, 9, 0}};
  for (const auto& c : cases) {
    uint8_t* ddst = to_device(std::vector<uint8_t>(n));
    cuda::copy_bytes(ddst + c[1], dsrc + c[0], c[2], nullptr);
    cuda::synchronize(nullptr);
    std::vector<uint8_t> want(n);
    std::memcpy(want.data() + c[1], src.data() + c[0], c[2]);
    EXPECT(to_host(ddst, n) == want, "copy of %zu bytes from offset %zu to %zu differs", c[2], c[0], c[1]);
    cudaFree(ddst);
  }
  cudaFree(dsrc);
}

// The one-pass reduction of spans (the IPC path's owner step) against the CPU's pairwise reductions and division:
// every datatype and op, 1, 3 and 18 sources (18: two batches), 1 and 3 destinations, in place, divided or not.
void reduce_spans() {
  std::mt19937_64 rng(9);
  const size_t count = 20011;
  for (int t = 0; t < kNumDatatypes; ++t) {
    auto dtype = static_cast<bagua_datatype_t>(t);
    const size_t bytes = count * datatype_size(dtype);
    for (int o = 0; o < kNumRedops; ++o) {
      auto op = static_cast<bagua_redop_t>(o);
      for (int nsrc : {1, 3, 18})
        for (int ndst : {1, 3})
          for (bool in_place : {false, true}) {
            const int divisor = op == BAGUA_AVG ? 3 : 0;
            std::vector<std::vector<uint8_t>> src(nsrc, std::vector<uint8_t>(bytes));
            for (auto& v : src)
              for (auto& b : v) b = static_cast<uint8_t>(rng());
            std::vector<uint8_t> want = src[0];
            for (int k = 1; k < nsrc; ++k)
              reduce_from_with(CpuKernels::kScalar, want.data(), want.data(), src[k].data(), count, dtype, op);
            if (divisor) divide_by_with(CpuKernels::kScalar, want.data(), count, dtype, divisor);
            std::vector<uint8_t*> dsrc, ddst;
            for (auto& v : src) dsrc.push_back(to_device(v));
            for (int d = 0; d < ndst; ++d)
              ddst.push_back(in_place && d == 0 ? dsrc[0] : to_device(std::vector<uint8_t>(bytes)));
            std::vector<void*> dsts(ddst.begin(), ddst.end());
            std::vector<const void*> srcs(dsrc.begin(), dsrc.end());
            cuda::reduce_spans(dsts.data(), ndst, srcs.data(), nsrc, count, dtype, op, divisor, nullptr);
            cuda::synchronize(nullptr);
            for (int d = 0; d < ndst; ++d)
              EXPECT(to_host(ddst[d], bytes) == want,
                     "reduction of %d spans into %d (%s), %s %s: destination %d differs", nsrc, ndst,
                     in_place ? "in place" : "out of place", datatype_name(dtype), redop_name(op), d);
            for (int d = in_place ? 1 : 0; d < ndst; ++d) cudaFree(ddst[d]);
            for (uint8_t* p : dsrc) cudaFree(p);
          }
    }
  }
}

// The IPC path's kernels on the caller's stream (cuda::late_copy_bytes, late_reduce_spans), whose addresses are
// words in mapped host memory read when they run: the same bytes as copy_bytes and reduce_spans, alignments chosen
// at run time, and nothing touched while a word is 0.
void late_spans() {
  uint64_t* words = nullptr;
  if (cudaHostAlloc(reinterpret_cast<void**>(&words), 64 * sizeof(uint64_t),
                    cudaHostAllocMapped | cudaHostAllocPortable) != cudaSuccess) {
    EXPECT(false, "cudaHostAlloc of the late words failed");
    return;
  }
  const size_t n = 70001;
  std::vector<uint8_t> src(n);
  for (size_t i = 0; i < n; ++i) src[i] = static_cast<uint8_t>(i * 37 + 11);
  uint8_t* dsrc = to_device(src);
  const size_t cases[][3] = {{0, 0, n - 16}, {3, 3, 50001}, {4, 8, 40003}, {1, 2, 4099}, {5, 0, 17}};
  for (const auto& c : cases) {
    uint8_t* ddst = to_device(std::vector<uint8_t>(n));
    // Bases one byte below the buffers, offsets making up for it: the alignment is the sum's.
    words[0] = 0;
    words[1] = reinterpret_cast<uint64_t>(dsrc) - 1;
    cuda::late_copy_bytes({&words[0], c[1] + 1}, {&words[1], c[0] + 1}, c[2], nullptr);
    cuda::synchronize(nullptr);
    EXPECT(to_host(ddst, n) == std::vector<uint8_t>(n), "late copy with a base of 0 wrote");
    words[0] = reinterpret_cast<uint64_t>(ddst) - 1;
    cuda::late_copy_bytes({&words[0], c[1] + 1}, {&words[1], c[0] + 1}, c[2], nullptr);
    cuda::synchronize(nullptr);
    std::vector<uint8_t> want(n);
    std::memcpy(want.data() + c[1], src.data() + c[0], c[2]);
    EXPECT(to_host(ddst, n) == want, "late copy of %zu bytes from offset %zu to %zu differs", c[2], c[0], c[1]);
    cudaFree(ddst);
  }
  cudaFree(dsrc);
  std::mt19937_64 rng(13);
  const size_t count = 9001;
  for (bagua_datatype_t dtype : {BAGUA_FLOAT32, BAGUA_FLOAT16, BAGUA_INT64})
    for (bagua_redop_t op : {BAGUA_SUM, BAGUA_AVG, BAGUA_MAX})
      for (int nsrc : {1, 3, 18}) {
        const size_t bytes = count * datatype_size(dtype);
        const int ndst = nsrc == 18 ? 18 : 3, divisor = op == BAGUA_AVG ? nsrc : 0;
        std::vector<std::vector<uint8_t>> in(nsrc, std::vector<uint8_t>(bytes));
        for (auto& v : in)
          for (auto& b : v) b = static_cast<uint8_t>(rng());
        std::vector<uint8_t> want = in[0];
        for (int k = 1; k < nsrc; ++k)
          reduce_from_with(CpuKernels::kScalar, want.data(), want.data(), in[k].data(), count, dtype, op);
        if (divisor) divide_by_with(CpuKernels::kScalar, want.data(), count, dtype, divisor);
        // One device block per side; span k at k * bytes, its word holding the block's address.
        uint8_t* dsrc_block = to_device(std::vector<uint8_t>(bytes * nsrc));
        uint8_t* ddst_block = to_device(std::vector<uint8_t>(bytes * ndst));
        for (int k = 0; k < nsrc; ++k) cudaMemcpy(dsrc_block + k * bytes, in[k].data(), bytes, cudaMemcpyHostToDevice);
        std::vector<LateSpan> srcs, dsts;
        for (int k = 0; k < nsrc; ++k) srcs.push_back({&words[k % 2], k * bytes});
        for (int d = 0; d < ndst; ++d) dsts.push_back({&words[2], d * bytes});
        // A destination word of 0, then (from 2 sources on) a source word of 0: nothing written.
        words[0] = words[1] = reinterpret_cast<uint64_t>(dsrc_block);
        words[2] = 0;
        cuda::late_reduce_spans(dsts.data(), ndst, srcs.data(), nsrc, count, dtype, op, divisor, nullptr);
        cuda::synchronize(nullptr);
        if (nsrc > 1) {
          words[1] = 0;
          words[2] = reinterpret_cast<uint64_t>(ddst_block);
          cuda::late_reduce_spans(dsts.data(), ndst, srcs.data(), nsrc, count, dtype, op, divisor, nullptr);
          cuda::synchronize(nullptr);
          words[1] = words[0];
        }
        EXPECT(to_host(ddst_block, bytes * ndst) == std::vector<uint8_t>(bytes * ndst),
               "late reduction with a word of 0 wrote");
        words[2] = reinterpret_cast<uint64_t>(ddst_block);
        cuda::late_reduce_spans(dsts.data(), ndst, srcs.data(), nsrc, count, dtype, op, divisor, nullptr);
        cuda::synchronize(nullptr);
        std::vector<uint8_t> got = to_host(ddst_block, bytes * ndst);
        for (int d = 0; d < ndst; ++d)
          EXPECT(std::memcmp(got.data() + d * bytes, want.data(), bytes) == 0,
                 "late reduction of %d spans (%s, %s): destination %d differs", nsrc, datatype_name(dtype),
                 redop_name(op), d);
        cudaFree(dsrc_block);
        cudaFree(ddst_block);
      }
  cudaFreeHost(words);
}

// Device memory holding `host` at a byte offset (offset 0 is cudaMalloc's 256-byte alignment), so kernels meet
// buffers that are not 16- or 4-byte aligned.
template <typename T>
struct Shifted {
  uint8_t* base = nullptr;
  T* ptr = nullptr;
  Shifted(const std::vector<T>& host, size_t offset) {
    cudaMalloc(&base, host.size() * sizeof(T) + offset + 1);
    ptr = reinterpret_cast<T*>(base + offset);
    cudaMemcpy(ptr, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice);
  }
  ~Shifted() { cudaFree(base); }
  Shifted(const Shifted&) = delete;
  Shifted& operator=(const Shifted&) = delete;
};

// Min-max codes and decompress-accumulate for every bits, chunk sizes that are and are not multiples of 4 and 32,
// nearest and stochastic rounding with index bases that are and are not multiples of 32 (the CUDA kernel shares
// pair hashes between lanes only for the former) and one that crosses 2^32, counts below one chunk, and buffers
// at offsets that rule out wide accesses.
void quantization() {
  std::mt19937 rng(3);
  std::normal_distribution<float> dist(0.0f, 2.0f);
  const size_t count = 123457;
  std::vector<float> x(count);
  for (auto& v : x) v = dist(rng);
  x[5000] = std::numeric_limits<float>::infinity();  // one poisoned chunk
  struct Layout {
    size_t count, x_offset, q_offset;  // elements; bytes
  };
  const Layout layouts[] = {{count, 0, 0}, {count, 4, 1}, {200, 0, 0}, {5, 8, 4}};
  const uint64_t bases[] = {0, 1000, (uint64_t{1} << 32) - 16384};  // the last crosses 2^32
  for (const Layout& layout : layouts)
    for (int bits : {1, 2, 4, 8})
      for (size_t chunk : {size_t(256), size_t(300), size_t(1000), size_t(1024), size_t(4096)})
        for (int rounding = 0; rounding < 4; ++rounding) {
          if (layout.count < count && chunk != 256 && chunk != 300) continue;
          MinMaxFormat f{bits, chunk};
          RoundingKey key{rounding > 0, 99, 5, 2, rounding > 0 ? bases[rounding - 1] : 1000};
          const size_t n = layout.count, bytes = minmax_compressed_bytes(n, f);
          std::vector<uint8_t> want(bytes);
          minmax_compress(x.data(), BAGUA_FLOAT32, n, f, key, want.data());
          Shifted<float> dx(std::vector<float>(x.begin(), x.begin() + n), layout.x_offset);
          Shifted<uint8_t> dq(std::vector<uint8_t>(bytes, 0xAB), layout.q_offset);
          cuda::minmax_compress(dx.ptr, n, f, key, dq.ptr, nullptr);
          cuda::synchronize(nullptr);
          EXPECT(to_host(dq.ptr, bytes) == want,
                 "min-max codes bits %d chunk %zu count %zu stochastic %d base %llu offsets %zu/%zu differ", bits,
                 chunk, n, rounding > 0 ? 1 : 0, static_cast<unsigned long long>(key.index_base), layout.x_offset,
                 layout.q_offset);
          std::vector<float> acc(n, 0.5f);
          minmax_decompress_accumulate(want.data(), n, f, acc.data());
          Shifted<float> dacc(std::vector<float>(n, 0.5f), layout.x_offset);
          cuda::minmax_decompress_accumulate(dq.ptr, n, f, dacc.ptr, nullptr);
          cuda::synchronize(nullptr);
          std::vector<float> got = to_host(dacc.ptr, n);
          EXPECT(std::memcmp(got.data(), acc.data(), n * sizeof(float)) == 0,
                 "decompress-accumulate bits %d chunk %zu count %zu offsets %zu/%zu differs", bits, chunk, n,
                 layout.x_offset, layout.q_offset);
        }
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
  for (bagua_datatype_t t : {BAGUA_FLOAT32, BAGUA_FLOAT16, BAGUA_BFLOAT16})
    for (size_t offset : {size_t(0), size_t(1)}) {  // elements: offset 1 rules out wide accesses
      std::vector<uint8_t> in_bytes(n * datatype_size(t));
      if (t == BAGUA_FLOAT32)
        std::memcpy(in_bytes.data(), x.data(), n * 4);
      else
        cast_from_float(x.data(), n, in_bytes.data(), t);
      std::vector<float> cpu_err = err;
      std::vector<uint8_t> want(qbytes);
      minmax_compress_ef(in_bytes.data(), t, n, cpu_err.data(), f, key, want.data());
      Shifted<uint8_t> din(in_bytes, offset * datatype_size(t));
      Shifted<float> derr(err, offset * 4);
      Shifted<uint8_t> dq(std::vector<uint8_t>(qbytes), offset);
      cuda::minmax_compress_typed(din.ptr, t, n, derr.ptr, f, key, dq.ptr, nullptr);
      cuda::synchronize(nullptr);
      EXPECT(to_host(dq.ptr, qbytes) == want, "compress with error feedback, %s input, offset %zu, differs",
             datatype_name(t), offset);
      EXPECT(to_host(derr.ptr, n) == cpu_err, "error feedback state, %s input, offset %zu, differs", datatype_name(t),
             offset);
      std::vector<uint8_t> out_want(n * datatype_size(t));
      minmax_decompress(want.data(), n, f, out_want.data(), t);
      Shifted<uint8_t> dout(std::vector<uint8_t>(out_want.size()), offset * datatype_size(t));
      cuda::minmax_decompress(dq.ptr, n, f, dout.ptr, t, nullptr);
      cuda::synchronize(nullptr);
      EXPECT(to_host(dout.ptr, out_want.size()) == out_want, "decompress to %s, offset %zu, differs", datatype_name(t),
             offset);
    }
  // The fused owner step with the owner's error feedback: 2 peers (one kernel) and 18 (batches through scratch),
  // nearest and stochastic.
  for (int npeers : {2, 18})
    for (bool stochastic : {false, true}) {
      RoundingKey owner_key{stochastic, 3, 9, 1, 0};
      std::vector<std::vector<uint8_t>> peers(npeers, std::vector<uint8_t>(qbytes));
      for (auto& p : peers) {
        for (auto& v : x) v = dist(rng);
        minmax_compress(x.data(), BAGUA_FLOAT32, n, f, RoundingKey{}, p.data());
      }
      std::vector<float> own(n);
      for (auto& v : own) v = dist(rng);
      std::vector<float> e_cpu = err, red_cpu(n);
      std::vector<uint8_t> want(qbytes);
      std::vector<const uint8_t*> in_cpu, in_gpu;
      for (auto& p : peers) in_cpu.push_back(p.data());
      minmax_reduce_recompress(in_cpu.data(), npeers, own.data(), n, f, owner_key, e_cpu.data(), want.data(),
                               red_cpu.data());
      std::vector<uint8_t*> dpeers;
      for (auto& p : peers) dpeers.push_back(to_device(p));
      for (uint8_t* p : dpeers) in_gpu.push_back(p);
      float* down = to_device(own);
      float* de = to_device(err);
      float* dred = to_device(std::vector<float>(n));
      float* dscratch = to_device(std::vector<float>(n));
      uint8_t* dq = to_device(std::vector<uint8_t>(qbytes));
      cuda::minmax_reduce_recompress(in_gpu.data(), npeers, down, n, f, owner_key, de, dq, dred, dscratch, nullptr);
      cuda::synchronize(nullptr);
      EXPECT(to_host(dq, qbytes) == want, "fused owner step (%d peers, stochastic %d) codes differ", npeers,
             stochastic ? 1 : 0);
      EXPECT(to_host(dred, n) == red_cpu, "fused owner step (%d peers) sums differ", npeers);
      EXPECT(to_host(de, n) == e_cpu, "fused owner step (%d peers) error differs", npeers);
      for (uint8_t* p : dpeers) cudaFree(p);
      for (void* p : {static_cast<void*>(down), static_cast<void*>(de), static_cast<void*>(dred),
                      static_cast<void*>(dscratch), static_cast<void*>(dq)})
        cudaFree(p);
    }
  // Sign with error feedback, chunks that are and are not multiples of 4, aligned and offset buffers, with a NaN,
  // an Inf and exact zeros among the inputs.
  x[11] = NAN;
  x[2000] = INFINITY;
  x[3000] = 0.0f;
  x[3001] = -0.0f;
  for (size_t chunk : {size_t(256), size_t(300), size_t(1000), size_t(4096)})
    for (size_t offset : {size_t(0), size_t(1)}) {
      size_t sbytes = sign_compressed_bytes(n, chunk);
      std::vector<float> e_cpu = err;
      std::vector<uint8_t> want(sbytes);
      sign_compress(x.data(), n, chunk, e_cpu.data(), want.data());
      Shifted<float> dx(x, offset * 4);
      Shifted<float> de(err, offset * 4);
      Shifted<uint8_t> dq(std::vector<uint8_t>(sbytes, 0xEE), offset);
      cuda::sign_compress(dx.ptr, n, chunk, de.ptr, dq.ptr, nullptr);
      cuda::synchronize(nullptr);
      EXPECT(to_host(dq.ptr, sbytes) == want, "sign codes (chunk %zu, offset %zu) differ", chunk, offset);
      std::vector<float> got_e = to_host(de.ptr, n);
      EXPECT(std::memcmp(got_e.data(), e_cpu.data(), n * 4) == 0, "sign error feedback (chunk %zu, offset %zu) differs",
             chunk, offset);
      std::vector<float> dec(n);
      sign_decompress(want.data(), n, chunk, dec.data());
      cuda::sign_decompress(dq.ptr, n, chunk, dx.ptr, nullptr);
      cuda::synchronize(nullptr);
      std::vector<float> got = to_host(dx.ptr, n);
      EXPECT(std::memcmp(got.data(), dec.data(), n * 4) == 0, "sign decompress (chunk %zu, offset %zu) differs", chunk,
             offset);
    }
  for (auto& v : x) v = dist(rng);
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
    // BAGUA's MinMaxUInt8: random values; a constant tensor (its grid is 256 wide in fp32, so the top code must be
    // clamped before the conversion); a minimum of zero met as -0 by the CPU first and +0 by the first GPU thread;
    // a NaN element (code 255).
    std::vector<float> constant(n, 1.0f), zeros = x, with_nan = x;
    for (auto& v : zeros) v = std::fabs(v) + 1.0f;
    zeros[1] = -0.0f;
    zeros[256] = 0.0f;
    with_nan[77] = NAN;
    const std::pair<const char*, const std::vector<float>*> inputs[] = {
        {"random", &x}, {"constant", &constant}, {"signed zeros", &zeros}, {"NaN", &with_nan}};
    size_t ubytes = bagua_u8_compressed_bytes(n);
    for (const auto& [name, input] : inputs) {
      std::vector<uint8_t> want(ubytes);
      bagua_u8_compress(input->data(), n, want.data());
      float* din = to_device(*input);
      uint8_t* dq = to_device(std::vector<uint8_t>(ubytes, 0xAB));
      cuda::bagua_u8_compress(din, n, dq, nullptr);
      cuda::synchronize(nullptr);
      EXPECT(to_host(dq, ubytes) == want, "MinMaxUInt8 bytes differ (%s input)", name);
      std::vector<float> dec(n);
      bagua_u8_decompress(want.data(), n, dec.data());
      cuda::bagua_u8_decompress(dq, n, din, nullptr);
      cuda::synchronize(nullptr);
      std::vector<float> got = to_host(din, n);
      EXPECT(std::memcmp(got.data(), dec.data(), n * 4) == 0, "MinMaxUInt8 decompress differs (%s input)", name);
      cudaFree(din);
      cudaFree(dq);
    }
    cudaFree(dx);
    cudaFree(dh);
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

// A min-max chunk whose header has a finite min and a NaN max (not what the compressor writes, which makes both NaN,
// but what a corrupted or foreign buffer may hold): every element of that chunk decodes to NaN on both sides.
void half_poisoned_header() {
  const size_t n = 3000;
  std::vector<float> x(n);
  for (size_t i = 0; i < n; ++i) x[i] = static_cast<float>(i % 97) - 40.0f;
  for (int bits : {1, 2, 4, 8}) {
    const CompressionSpec spec{BAGUA_COMPRESS_MINMAX, {bits, 1024}};
    const size_t bytes = compressed_bytes(spec, n);
    std::vector<uint8_t> q(bytes);
    compress_floats(spec, x.data(), n, nullptr, RoundingKey{}, q.data());
    const uint32_t nan_bits = 0x7fc00000u;
    std::memcpy(q.data() + 4, &nan_bits, 4);  // the first chunk's max
    std::vector<float> dec(n), acc(n, 0.5f);
    decompress_floats(spec, q.data(), n, dec.data());
    decompress_accumulate_floats(spec, q.data(), n, acc.data());
    uint8_t* dq = to_device(q);
    float* dout = to_device(std::vector<float>(n));
    float* dacc = to_device(std::vector<float>(n, 0.5f));
    cuda::decompress_floats(spec, dq, n, dout, false, nullptr);
    cuda::decompress_floats(spec, dq, n, dacc, true, nullptr);
    cuda::synchronize(nullptr);
    std::vector<float> got = to_host(dout, n), got_acc = to_host(dacc, n);
    EXPECT(std::isnan(dec[0]) && std::isnan(dec[1023]) && !std::isnan(dec[1024]),
           "CPU: a NaN max must poison exactly its chunk (bits %d)", bits);
    EXPECT(std::memcmp(got.data(), dec.data(), n * 4) == 0, "half-poisoned header: decompress differs (bits %d)", bits);
    EXPECT(std::memcmp(got_acc.data(), acc.data(), n * 4) == 0,
           "half-poisoned header: decompress-accumulate differs (bits %d)", bits);
    cudaFree(dq);
    cudaFree(dout);
    cudaFree(dacc);
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
  copies();
  reduce_spans();
  late_spans();
  quantization();
  other_kernels();
  wire_formats();
  half_poisoned_header();
  averaging();
  gossip();
  std::printf("%s\n", g_failures ? "CUDA kernels: FAILED" : "CUDA kernels match the CPU bit for bit");
  return g_failures ? 1 : 0;
}

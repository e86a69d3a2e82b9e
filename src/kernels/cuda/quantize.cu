// CUDA min-max quantization ("minmax v1", docs/formats.md): one block per chunk. The block finds the chunk's
// min and max (exact, so the reduction order does not matter), then each thread forms whole code bytes with
// the CPU's arithmetic: t = (x - min) * inv_step, rint or stochastic_code (quantize_math.h), clamp.
#include <cuda_runtime_api.h>

#include <cstdint>

#include "base/error.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/half.h"
#include "kernels/quantize_math.h"

namespace bagua::cuda {

namespace {

constexpr int kThreads = 256;
constexpr size_t kHeaderBytes = 8;

__host__ __device__ size_t code_bytes(size_t len, int bits) {
  size_t raw = (len * static_cast<size_t>(bits) + 7) / 8;
  return (raw + 3) & ~size_t(3);
}

struct Grid {
  float min, step, inv_step;
  bool poisoned;
};

__device__ Grid make_grid(float lo, float hi, int bits, bool poisoned) {
  Grid g{lo, 0.0f, 0.0f, poisoned};
  if (poisoned) {
    g.min = __int_as_float(0x7fc00000);
    return g;
  }
  float levels = static_cast<float>((1u << bits) - 1);
  g.step = (hi - lo) / levels;
  g.inv_step = g.step > 0 ? levels / (hi - lo) : 0.0f;
  if (!isfinite(g.step) || !isfinite(g.inv_step)) {
    g.step = 0;
    g.inv_step = 0;
  }
  return g;
}

__device__ float load_input(const void* x, bagua_datatype_t dtype, size_t i) {
  if (dtype == BAGUA_FLOAT16) return fp16_to_float(static_cast<const uint16_t*>(x)[i]);
  if (dtype == BAGUA_BFLOAT16) return bf16_to_float(static_cast<const uint16_t*>(x)[i]);
  return static_cast<const float*>(x)[i];
}

// One block per chunk. With error feedback, t = x + e is staged in shared memory and e is updated.
__global__ void compress_kernel(const void* x, bagua_datatype_t dtype, float* error, size_t count, int bits,
                                size_t chunk, size_t block_bytes, bool stochastic, uint64_t seed, uint64_t step,
                                uint32_t rank, uint64_t index_base, uint8_t* out) {
  __shared__ float s_min[kThreads], s_max[kThreads];
  __shared__ int s_bad[kThreads];
  __shared__ float v[4096];
  size_t begin = blockIdx.x * chunk;
  size_t len = count - begin < chunk ? count - begin : chunk;
  for (size_t i = threadIdx.x; i < len; i += kThreads)
    v[i] = load_input(x, dtype, begin + i) + (error ? error[begin + i] : 0.0f);
  __syncthreads();
  uint8_t* block = out + blockIdx.x * block_bytes;
  float mn = __int_as_float(0x7f800000), mx = -mn;
  int bad = 0;
  for (size_t i = threadIdx.x; i < len; i += kThreads) {
    float e = v[i];
    bad |= !isfinite(e);
    mn = e < mn ? e : mn;
    mx = e > mx ? e : mx;
  }
  s_min[threadIdx.x] = mn;
  s_max[threadIdx.x] = mx;
  s_bad[threadIdx.x] = bad;
  __syncthreads();
  for (int half = kThreads / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) {
      float a = s_min[threadIdx.x + half], b = s_max[threadIdx.x + half];
      s_min[threadIdx.x] = a < s_min[threadIdx.x] ? a : s_min[threadIdx.x];
      s_max[threadIdx.x] = b > s_max[threadIdx.x] ? b : s_max[threadIdx.x];
      s_bad[threadIdx.x] |= s_bad[threadIdx.x + half];
    }
    __syncthreads();
  }
  Grid g = make_grid(unsigned_zero(s_min[0]), unsigned_zero(s_max[0]), bits, s_bad[0] != 0);
  if (threadIdx.x == 0) {
    float hdr[2] = {g.min, g.poisoned ? g.min : unsigned_zero(s_max[0])};
    for (int k = 0; k < 8; ++k) block[k] = reinterpret_cast<const uint8_t*>(hdr)[k];
  }
  const float top = static_cast<float>((1u << bits) - 1);
  const size_t per_byte = 8 / static_cast<size_t>(bits);
  const size_t nbytes = code_bytes(len, bits);
  for (size_t byte = threadIdx.x; byte < nbytes; byte += kThreads) {
    uint32_t packed = 0;
    for (size_t k = 0; k < per_byte; ++k) {
      size_t i = byte * per_byte + k;
      if (i >= len || g.poisoned) continue;
      float t = (v[i] - g.min) * g.inv_step;
      if (stochastic) {
        uint32_t r = rounding_draw16(seed, step, rank, index_base + begin + i);
        packed |= static_cast<uint32_t>(stochastic_code(t, r, static_cast<int32_t>(top))) << (k * bits);
        continue;
      }
      float r = rintf(t);
      r = r >= 0.0f ? (r > top ? top : r) : 0.0f;  // NaN (an overflowing range): code 0, as on the CPU
      packed |= static_cast<uint32_t>(r) << (k * bits);
    }
    block[kHeaderBytes + byte] = static_cast<uint8_t>(packed);
  }
  if (error) {
    __syncthreads();
    for (size_t i = threadIdx.x; i < len; i += kThreads) {
      uint32_t q = (block[kHeaderBytes + i / per_byte] >> ((i % per_byte) * bits)) & ((1u << bits) - 1);
      float deq = g.poisoned ? g.min : g.min + static_cast<float>(q) * g.step;
      error[begin + i] = feedback_residual(v[i] - deq);
    }
  }
}

// Decompresses one chunk per block: into acc (+=) or into out of out_dtype.
__global__ void decompress_acc_kernel(const uint8_t* in, size_t count, int bits, size_t chunk, size_t block_bytes,
                                      float* acc, bool accumulate, bagua_datatype_t out_dtype) {
  size_t begin = blockIdx.x * chunk;
  size_t len = count - begin < chunk ? count - begin : chunk;
  const uint8_t* block = in + blockIdx.x * block_bytes;
  float lo, hi;
  memcpy(&lo, block, 4);
  memcpy(&hi, block + 4, 4);
  bool poisoned = isnan(lo) || isnan(hi);
  float levels = static_cast<float>((1u << bits) - 1);
  float step = poisoned ? 0.0f : (hi - lo) / levels;
  if (!isfinite(step)) step = 0.0f;
  const size_t per_byte = 8 / static_cast<size_t>(bits);
  for (size_t i = threadIdx.x; i < len; i += kThreads) {
    uint32_t q = (block[kHeaderBytes + i / per_byte] >> ((i % per_byte) * bits)) & ((1u << bits) - 1);
    float deq = canonical_float(poisoned ? lo : lo + static_cast<float>(q) * step);
    if (out_dtype == BAGUA_FLOAT32 && accumulate)
      acc[begin + i] = canonical_float(acc[begin + i] + deq);
    else if (out_dtype == BAGUA_FLOAT32)
      acc[begin + i] = deq;
    else if (out_dtype == BAGUA_FLOAT16)
      reinterpret_cast<uint16_t*>(acc)[begin + i] = float_to_fp16(deq);
    else
      reinterpret_cast<uint16_t*>(acc)[begin + i] = float_to_bf16(deq);
  }
}

void check_launch(const char* what) {
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) fail(BAGUA_ERR_CUDA, "{}: {}", what, cudaGetErrorString(err));
}

}  // namespace

void minmax_compress_typed(const void* x, bagua_datatype_t dtype, size_t count, float* error,
                           const MinMaxFormat& format, const RoundingKey& key, uint8_t* out, void* stream) {
  validate(format);
  if (count == 0) return;
  size_t chunks = (count + format.chunk - 1) / format.chunk;
  compress_kernel<<<static_cast<unsigned>(chunks), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      x, dtype, error, count, format.bits, format.chunk, kHeaderBytes + code_bytes(format.chunk, format.bits),
      key.stochastic, key.seed, key.step, key.rank, key.index_base, out);
  check_launch("CUDA min-max compress");
}

void minmax_compress(const float* x, size_t count, const MinMaxFormat& format, const RoundingKey& key, uint8_t* out,
                     void* stream) {
  minmax_compress_typed(x, BAGUA_FLOAT32, count, nullptr, format, key, out, stream);
}

static void decompress(const uint8_t* in, size_t count, const MinMaxFormat& format, void* out, bool accumulate,
                       bagua_datatype_t dtype, void* stream) {
  validate(format);
  if (count == 0) return;
  size_t chunks = (count + format.chunk - 1) / format.chunk;
  decompress_acc_kernel<<<static_cast<unsigned>(chunks), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      in, count, format.bits, format.chunk, kHeaderBytes + code_bytes(format.chunk, format.bits),
      static_cast<float*>(out), accumulate, dtype);
  check_launch("CUDA min-max decompress");
}

void minmax_decompress_accumulate(const uint8_t* in, size_t count, const MinMaxFormat& format, float* acc,
                                  void* stream) {
  decompress(in, count, format, acc, true, BAGUA_FLOAT32, stream);
}

void minmax_decompress(const uint8_t* in, size_t count, const MinMaxFormat& format, void* x, bagua_datatype_t dtype,
                       void* stream) {
  decompress(in, count, format, x, false, dtype, stream);
}

void minmax_reduce_recompress(const uint8_t* const* inputs, int ninputs, const float* own, size_t count,
                              const MinMaxFormat& format, const RoundingKey& key, float* owner_error, uint8_t* out,
                              float* reduced, float* scratch, void* stream) {
  // The CPU's order: acc = own, then += each input in turn, then compress acc (adding the owner's error).
  auto s = static_cast<cudaStream_t>(stream);
  cudaMemcpyAsync(scratch, own, count * sizeof(float), cudaMemcpyDeviceToDevice, s);
  for (int k = 0; k < ninputs; ++k) minmax_decompress_accumulate(inputs[k], count, format, scratch, stream);
  if (reduced) cudaMemcpyAsync(reduced, scratch, count * sizeof(float), cudaMemcpyDeviceToDevice, s);
  minmax_compress_typed(scratch, BAGUA_FLOAT32, count, owner_error, format, key, out, stream);
}

}  // namespace bagua::cuda

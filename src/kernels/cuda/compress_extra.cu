// CUDA versions of the sign, BAGUA MinMaxUInt8 and cast kernels (docs/formats.md), with the CPU's arithmetic:
// the sign scale sums t*t in fp64 in element order (one thread per chunk), BAGUA's range is a whole-tensor
// min/max (exact in any order).
#include <cuda_runtime_api.h>

#include <cstdint>

#include "base/error.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/half.h"
#include "kernels/quantize_math.h"

namespace bagua::cuda {

namespace {

__host__ __device__ size_t sign_block_bytes(size_t len) { return 4 + ((len + 7) / 8 + 3) / 4 * 4; }

// One thread per chunk, the CPU's order: element i into fp64 lane i mod 8 (each lane in element order),
// then the lanes 0..7 in order.
__global__ void sign_scale_kernel(const float* x, const float* error, size_t count, size_t chunk, float* scales) {
  size_t c = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  size_t begin = c * chunk;
  if (begin >= count) return;
  size_t len = count - begin < chunk ? count - begin : chunk;
  double lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (size_t i = 0; i < len; ++i) {
    double t = static_cast<double>(x[begin + i] + (error ? error[begin + i] : 0.0f));
    lane[i % 8] += t * t;
  }
  double sum_sq = 0;
  for (int l = 0; l < 8; ++l) sum_sq += lane[l];
  scales[c] = canonical_float(static_cast<float>(sqrt(sum_sq / static_cast<double>(len))));
}

// One thread per output byte of sign bits; also writes the scale and updates the error.
__global__ void sign_pack_kernel(const float* x, float* error, size_t count, size_t chunk, const float* scales,
                                 uint8_t* out) {
  size_t chunks = (count + chunk - 1) / chunk;
  size_t full_block = sign_block_bytes(chunk);
  for (size_t c = blockIdx.y; c < chunks; c += gridDim.y) {  // grid y is capped at 65535: stride over chunks
    size_t begin = c * chunk;
    size_t len = count - begin < chunk ? count - begin : chunk;
    uint8_t* block = out + c * full_block;
    float scale = scales[c];
    if (blockIdx.x == 0 && threadIdx.x == 0) memcpy(block, &scale, 4);
    size_t nbytes = sign_block_bytes(len) - 4;
    for (size_t byte = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; byte < nbytes;
         byte += static_cast<size_t>(gridDim.x) * blockDim.x) {
      uint32_t bits = 0;
      for (size_t k = 0; k < 8; ++k) {
        size_t i = byte * 8 + k;
        if (i >= len) break;
        float t = x[begin + i] + (error ? error[begin + i] : 0.0f);
        bool positive = !(t < 0.0f);
        if (positive) bits |= 1u << k;
        if (error) error[begin + i] = feedback_residual(t - (positive ? scale : -scale));
      }
      block[4 + byte] = static_cast<uint8_t>(bits);
    }
  }
}

// x = +-scale, or with accumulate x += +-scale (the CPU's sign_expand).
__global__ void sign_unpack_kernel(const uint8_t* in, size_t count, size_t chunk, float* x, bool accumulate) {
  size_t full_block = sign_block_bytes(chunk);
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    size_t c = i / chunk, j = i % chunk;
    const uint8_t* block = in + c * full_block;
    float scale;
    memcpy(&scale, block, 4);
    float v = canonical_float((block[4 + j / 8] >> (j % 8)) & 1u ? scale : -scale);
    x[i] = accumulate ? canonical_float(x[i] + v) : v;
  }
}

// The fp16/bf16 wire format with error feedback: t = x + e, out = cast(t), e = t - float(out).
__global__ void cast_ef_kernel(const float* x, float* error, size_t count, uint16_t* out, bool fp16) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    float t = canonical_float(x[i] + error[i]);
    uint16_t h = fp16 ? float_to_fp16(t) : float_to_bf16(t);
    out[i] = h;
    error[i] = feedback_residual(t - (fp16 ? fp16_to_float(h) : bf16_to_float(h)));
  }
}

// Low-precision decentralized SGD's difference, the CPU's operations in its order (no contraction).
struct GossipReplicas {
  const float* replica[kMaxGossipReplicas];
  float weight[kMaxGossipReplicas];
};
__global__ void gossip_difference_kernel(float* diff, const float* x, const float* self, GossipReplicas r,
                                         int nreplicas, float self_weight, size_t count) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    float d = self_weight * self[i];
    for (int k = 0; k < nreplicas; ++k) d += r.weight[k] * r.replica[k][i];
    diff[i] = canonical_float((x[i] + (d - self[i])) - self[i]);
  }
}

// acc += float(in), a NaN sum canonical (the CPU's reduce_from).
__global__ void cast_accumulate_kernel(const uint16_t* in, size_t count, float* acc, bool fp16) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<size_t>(gridDim.x) * blockDim.x)
    acc[i] = canonical_float(acc[i] + (fp16 ? fp16_to_float(in[i]) : bf16_to_float(in[i])));
}

__global__ void cast_from_kernel(const float* in, size_t count, uint16_t* out, bool fp16) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<size_t>(gridDim.x) * blockDim.x)
    out[i] = fp16 ? float_to_fp16(in[i]) : float_to_bf16(in[i]);
}

__global__ void cast_to_kernel(const uint16_t* in, size_t count, float* out, bool fp16) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<size_t>(gridDim.x) * blockDim.x)
    out[i] = fp16 ? fp16_to_float(in[i]) : bf16_to_float(in[i]);
}

// BAGUA: one block finds the whole tensor's min and max and writes the 32-byte header.
__global__ void u8_range_kernel(const float* x, size_t count, uint8_t* out) {
  __shared__ float s_min[256], s_max[256];
  float mn = x[0], mx = x[0];
  for (size_t i = threadIdx.x; i < count; i += 256) {
    mn = x[i] < mn ? x[i] : mn;
    mx = x[i] > mx ? x[i] : mx;
  }
  s_min[threadIdx.x] = mn;
  s_max[threadIdx.x] = mx;
  __syncthreads();
  for (int half = 128; half > 0; half /= 2) {
    if (threadIdx.x < half) {
      float a = s_min[threadIdx.x + half], b = s_max[threadIdx.x + half];
      s_min[threadIdx.x] = a < s_min[threadIdx.x] ? a : s_min[threadIdx.x];
      s_max[threadIdx.x] = b > s_max[threadIdx.x] ? b : s_max[threadIdx.x];
    }
    __syncthreads();
  }
  if (threadIdx.x < 32) out[threadIdx.x] = 0;
  __syncthreads();
  if (threadIdx.x == 0) {
    memcpy(out, &s_min[0], 4);
    memcpy(out + 4, &s_max[0], 4);
  }
}

__global__ void u8_codes_kernel(const float* x, size_t count, uint8_t* out) {
  float lo, hi;
  memcpy(&lo, out, 4);
  memcpy(&hi, out + 4, 4);
  float scale = 255.0f / (hi - lo + 1e-7f);
  float upper = rintf(hi * scale);
  float lower = upper - 255.0f;
  size_t padded = (count + 31) / 32 * 32;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < padded;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    if (i >= count) {
      out[32 + i] = 0;
      continue;
    }
    float q = rintf(x[i] * scale);
    q = (q < upper ? q : upper) - lower;
    out[32 + i] = static_cast<uint8_t>(q < 0.0f ? 0.0f : q);
  }
}

__global__ void u8_decode_kernel(const uint8_t* in, size_t count, float* x) {
  float lo, hi;
  memcpy(&lo, in, 4);
  memcpy(&hi, in + 4, 4);
  float scale = 255.0f / (hi - lo + 1e-7f);
  float lower = rintf(hi * scale) - 255.0f;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<size_t>(gridDim.x) * blockDim.x)
    x[i] = canonical_float((static_cast<float>(in[32 + i]) + lower) / scale);
}

unsigned blocks_for(size_t n) {
  size_t b = (n + 255) / 256;
  return static_cast<unsigned>(b < 65535 ? (b ? b : 1) : 65535);
}

void check(const char* what) {
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) fail(BAGUA_ERR_CUDA, "{}: {}", what, cudaGetErrorString(err));
}

}  // namespace

void sign_compress(const float* x, size_t count, size_t chunk, float* error, uint8_t* out, void* stream) {
  if (count == 0) return;
  if (chunk == 0) fail(BAGUA_ERR_INVALID_ARGUMENT, "sign compression chunk is 0");
  auto s = static_cast<cudaStream_t>(stream);
  size_t chunks = (count + chunk - 1) / chunk;
  float* scales = nullptr;
  if (cudaMallocAsync(&scales, chunks * sizeof(float), s) != cudaSuccess)
    fail(BAGUA_ERR_CUDA, "cudaMallocAsync failed");
  sign_scale_kernel<<<static_cast<unsigned>((chunks + 127) / 128), 128, 0, s>>>(x, error, count, chunk, scales);
  dim3 grid(static_cast<unsigned>(((chunk + 7) / 8 + 255) / 256),
            static_cast<unsigned>(chunks < 65535 ? chunks : 65535));
  sign_pack_kernel<<<grid, 256, 0, s>>>(x, error, count, chunk, scales, out);
  cudaFreeAsync(scales, s);
  check("CUDA sign compress");
}

void sign_decompress(const uint8_t* in, size_t count, size_t chunk, float* x, void* stream) {
  if (count == 0) return;
  sign_unpack_kernel<<<blocks_for(count), 256, 0, static_cast<cudaStream_t>(stream)>>>(in, count, chunk, x, false);
  check("CUDA sign decompress");
}

void gossip_difference(float* diff, const float* x, const float* self, const float* const* replicas,
                       const float* weights, int nreplicas, float self_weight, size_t count, void* stream) {
  if (nreplicas < 0 || nreplicas > kMaxGossipReplicas)
    fail(BAGUA_ERR_INVALID_ARGUMENT, "{} replicas (at most {})", nreplicas, kMaxGossipReplicas);
  if (count == 0) return;
  GossipReplicas r{};
  for (int k = 0; k < nreplicas; ++k) {
    r.replica[k] = replicas[k];
    r.weight[k] = weights[k];
  }
  gossip_difference_kernel<<<blocks_for(count), 256, 0, static_cast<cudaStream_t>(stream)>>>(
      diff, x, self, r, nreplicas, self_weight, count);
  check("CUDA gossip difference");
}

void compress_floats(const CompressionSpec& spec, const float* x, size_t count, float* error, const RoundingKey& key,
                     uint8_t* out, void* stream) {
  if (count == 0) return;
  auto s = static_cast<cudaStream_t>(stream);
  switch (spec.kind) {
    case BAGUA_COMPRESS_MINMAX:
      minmax_compress_typed(x, BAGUA_FLOAT32, count, error, spec.format, key, out, stream);
      return;
    case BAGUA_COMPRESS_SIGN: sign_compress(x, count, spec.format.chunk, error, out, stream); return;
    case BAGUA_COMPRESS_FP16:
    case BAGUA_COMPRESS_BF16: {
      const bool fp16 = spec.kind == BAGUA_COMPRESS_FP16;
      if (error == nullptr) {
        cast_from_float(x, count, out, fp16 ? BAGUA_FLOAT16 : BAGUA_BFLOAT16, stream);
        return;
      }
      cast_ef_kernel<<<blocks_for(count), 256, 0, s>>>(x, error, count, reinterpret_cast<uint16_t*>(out), fp16);
      check("CUDA cast with error feedback");
      return;
    }
  }
  fail(BAGUA_ERR_INVALID_ARGUMENT, "compression kind {} is not a bagua_compress_kind_t", static_cast<int>(spec.kind));
}

void decompress_floats(const CompressionSpec& spec, const uint8_t* in, size_t count, float* out, bool accumulate,
                       void* stream) {
  if (count == 0) return;
  auto s = static_cast<cudaStream_t>(stream);
  switch (spec.kind) {
    case BAGUA_COMPRESS_MINMAX:
      if (accumulate)
        minmax_decompress_accumulate(in, count, spec.format, out, stream);
      else
        minmax_decompress(in, count, spec.format, out, BAGUA_FLOAT32, stream);
      return;
    case BAGUA_COMPRESS_SIGN:
      sign_unpack_kernel<<<blocks_for(count), 256, 0, s>>>(in, count, spec.format.chunk, out, accumulate);
      check("CUDA sign decompress");
      return;
    case BAGUA_COMPRESS_FP16:
    case BAGUA_COMPRESS_BF16: {
      const bool fp16 = spec.kind == BAGUA_COMPRESS_FP16;
      if (!accumulate) {
        cast_to_float(in, fp16 ? BAGUA_FLOAT16 : BAGUA_BFLOAT16, count, out, stream);
        return;
      }
      cast_accumulate_kernel<<<blocks_for(count), 256, 0, s>>>(reinterpret_cast<const uint16_t*>(in), count, out, fp16);
      check("CUDA cast-accumulate");
      return;
    }
  }
  fail(BAGUA_ERR_INVALID_ARGUMENT, "compression kind {} is not a bagua_compress_kind_t", static_cast<int>(spec.kind));
}

void cast_from_float(const float* in, size_t count, void* out, bagua_datatype_t dtype, void* stream) {
  if (dtype != BAGUA_FLOAT16 && dtype != BAGUA_BFLOAT16)
    fail(BAGUA_ERR_INVALID_ARGUMENT, "casts go to float16 or bfloat16");
  if (count == 0) return;
  cast_from_kernel<<<blocks_for(count), 256, 0, static_cast<cudaStream_t>(stream)>>>(
      in, count, static_cast<uint16_t*>(out), dtype == BAGUA_FLOAT16);
  check("CUDA cast");
}

void cast_to_float(const void* in, bagua_datatype_t dtype, size_t count, float* out, void* stream) {
  if (dtype != BAGUA_FLOAT16 && dtype != BAGUA_BFLOAT16)
    fail(BAGUA_ERR_INVALID_ARGUMENT, "casts come from float16 or bfloat16");
  if (count == 0) return;
  cast_to_kernel<<<blocks_for(count), 256, 0, static_cast<cudaStream_t>(stream)>>>(static_cast<const uint16_t*>(in),
                                                                                   count, out, dtype == BAGUA_FLOAT16);
  check("CUDA cast");
}

void bagua_u8_compress(const float* x, size_t count, uint8_t* out, void* stream) {
  if (count == 0) return;
  auto s = static_cast<cudaStream_t>(stream);
  u8_range_kernel<<<1, 256, 0, s>>>(x, count, out);
  u8_codes_kernel<<<blocks_for(count), 256, 0, s>>>(x, count, out);
  check("CUDA MinMaxUInt8 compress");
}

void bagua_u8_decompress(const uint8_t* in, size_t count, float* x, void* stream) {
  if (count == 0) return;
  u8_decode_kernel<<<blocks_for(count), 256, 0, static_cast<cudaStream_t>(stream)>>>(in, count, x);
  check("CUDA MinMaxUInt8 decompress");
}

}  // namespace bagua::cuda

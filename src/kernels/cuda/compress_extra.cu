// CUDA versions of the sign, BAGUA MinMaxUInt8 and cast kernels (docs/formats.md), with the CPU's arithmetic.
// Sign: one team of threads per chunk (chunk_team.h); the scale sums t*t in fp64 in the CPU's order from the
// chunk's values in shared memory. BAGUA's range is a whole-tensor min/max (exact in any order).
#include <cuda_runtime_api.h>

#include <cstdint>

#include "base/error.h"
#include "kernels/cuda/chunk_team.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/launch.h"
#include "kernels/half.h"
#include "kernels/quantize_math.h"

namespace bagua::cuda {

namespace {

constexpr size_t kMaxSignChunk = 4096;

__host__ __device__ size_t sign_code_bytes(size_t len) { return ((len + 7) / 8 + 3) / 4 * 4; }

struct SignArgs {
  const float* x;  // compress: the values; decompress: unused
  float* error;    // compress: error feedback, or NULL
  const uint8_t* in;
  float* values;  // decompress: the output
  uint8_t* out;   // compress: the blocks
  size_t count, chunk, block_bytes;
  unsigned team_threads;
  bool accumulate, wide, words;
};

// t = x + e; scale = sqrt(sum t^2 / len) in fp64 in the CPU's order (element i into lane i mod 8, each lane in
// element order, then lanes 0..7); bit 1 for t >= 0 (NaN too), LSB first; e = t -+ scale.
__global__ void __launch_bounds__(kMaxTeamThreads) sign_compress_kernel(const __grid_constant__ SignArgs a) {
  BAGUA_DYNAMIC_SHARED(float, s_chunks);  // each team's t values
  __shared__ float s_scale[kBlockThreads / 32];
  const Team tm = this_team(a.count, a.chunk, a.team_threads);
  float* chunk_values = s_chunks + tm.index * a.chunk;
  float t[kQuadsPerThread][4];
#pragma unroll
  for (int k = 0; k < kQuadsPerThread; ++k) {
    const size_t q = tm.thread + static_cast<size_t>(k) * a.team_threads, first = tm.begin + 4 * q;
    const int valid = quad_valid(q, tm.len);
    float e[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    load_quad(a.x, BAGUA_FLOAT32, first, valid, a.wide, t[k]);
    if (a.error) load_quad(a.error, BAGUA_FLOAT32, first, valid, a.wide, e);
#pragma unroll
    for (int m = 0; m < 4; ++m) {
      t[k][m] = t[k][m] + e[m];
      if (m < valid) chunk_values[4 * q + m] = t[k][m];
    }
  }
  __syncthreads();
  if (tm.thread < 32) {  // the team's first warp
    double lane_sum = 0;
    if (tm.thread < 8)
      for (size_t i = tm.thread; i < tm.len; i += 8) {
        const double d = static_cast<double>(chunk_values[i]);
        lane_sum += d * d;
      }
    double sum = 0;
    for (int lane = 0; lane < 8; ++lane) sum += __shfl_sync(kFullWarp, lane_sum, lane);
    if (tm.thread == 0 && tm.len > 0)
      s_scale[tm.index] = canonical_float(static_cast<float>(sqrt(sum / static_cast<double>(tm.len))));
  }
  __syncthreads();
  if (tm.len == 0) return;  // whole warps
  const float scale = s_scale[tm.index];
  uint8_t* block = a.out + tm.chunk * a.block_bytes;
  if (tm.thread == 0) store_float(block, scale, a.words);
  const size_t nbytes = sign_code_bytes(tm.len);
#pragma unroll
  for (int k = 0; k < kQuadsPerThread; ++k) {
    const size_t q = tm.thread + static_cast<size_t>(k) * a.team_threads, first = tm.begin + 4 * q;
    const int valid = quad_valid(q, tm.len);
    uint32_t bits = 0;
    float e[4];
    for (int m = 0; m < 4; ++m) {
      const bool positive = !(t[k][m] < 0.0f);
      if (m < valid && positive) bits |= 1u << m;
      e[m] = feedback_residual(t[k][m] - (positive ? scale : -scale));
    }
    store_code_word<1>(block + 4, q, gather_code_word<1>(bits), nbytes, a.words);
    if (a.error && valid > 0) store_quad(a.error, BAGUA_FLOAT32, first, valid, a.wide, e);
  }
}

// values = +-scale, or with accumulate values += +-scale (the CPU's sign_expand).
__global__ void __launch_bounds__(kMaxTeamThreads) sign_decompress_kernel(const __grid_constant__ SignArgs a) {
  const Team tm = this_team(a.count, a.chunk, a.team_threads);
  if (tm.len == 0) return;
  const uint8_t* block = a.in + tm.chunk * a.block_bytes;
  const float scale = load_float(block, a.words);
  const float plus = canonical_float(scale), minus = canonical_float(-scale);
#pragma unroll
  for (int k = 0; k < kQuadsPerThread; ++k) {
    const size_t q = tm.thread + static_cast<size_t>(k) * a.team_threads, first = tm.begin + 4 * q;
    const int valid = quad_valid(q, tm.len);
    if (valid == 0) continue;
    const uint32_t bits = load_quad_codes<1>(block + 4, q, a.words);
    float v[4];
    for (int m = 0; m < 4; ++m) v[m] = (bits >> m) & 1u ? plus : minus;
    if (a.accumulate) {
      float acc[4];
      load_quad(a.values, BAGUA_FLOAT32, first, valid, a.wide, acc);
      for (int m = 0; m < 4; ++m) v[m] = canonical_float(acc[m] + v[m]);
    }
    store_quad(a.values, BAGUA_FLOAT32, first, valid, a.wide, v);
  }
}

SignArgs sign_args(size_t count, size_t chunk) {
  if (chunk == 0 || chunk > kMaxSignChunk)
    fail(BAGUA_ERR_INVALID_ARGUMENT, "CUDA sign compression takes chunks of 1 to {} elements, not {}", kMaxSignChunk,
         chunk);
  SignArgs a{};
  a.count = count;
  a.chunk = chunk;
  a.block_bytes = 4 + sign_code_bytes(chunk);
  a.team_threads = team_shape(count, chunk).team_threads;
  return a;
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
  for (unsigned half = 128; half > 0; half /= 2) {
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
    const float lo = unsigned_zero(s_min[0]), hi = unsigned_zero(s_max[0]);  // as the CPU: +0 for either zero
    memcpy(out, &lo, 4);
    memcpy(out + 4, &hi, 4);
  }
}

__global__ void u8_codes_kernel(const float* x, size_t count, uint8_t* out) {
  float lo, hi;
  memcpy(&lo, out, 4);
  memcpy(&hi, out + 4, 4);
  float scale = 255.0f / (hi - lo + 1e-7f);
  float lower = rintf(hi * scale) - 255.0f;
  size_t padded = (count + 31) / 32 * 32;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < padded;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    if (i >= count) {
      out[32 + i] = 0;
      continue;
    }
    out[32 + i] = u8_code(rintf(x[i] * scale), lower);
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
  SignArgs a = sign_args(count, chunk);
  if (count == 0) return;
  a.x = x;
  a.error = error;
  a.out = out;
  a.wide = chunk % 4 == 0 && aligned_to(x, 16) && aligned_to(error, 16);
  a.words = aligned_to(out, 4);
  const TeamShape shape = team_shape(count, chunk);
  const size_t shared = shape.teams_per_block * chunk * sizeof(float);
  BAGUA_LAUNCH(sign_compress_kernel, static_cast<unsigned>(shape.blocks), shape.block_threads(), shared,
               static_cast<cudaStream_t>(stream), a);
  check("CUDA sign compress");
}

static void sign_expand(const uint8_t* in, size_t count, size_t chunk, float* x, bool accumulate, void* stream) {
  SignArgs a = sign_args(count, chunk);
  if (count == 0) return;
  a.in = in;
  a.values = x;
  a.accumulate = accumulate;
  a.wide = chunk % 4 == 0 && aligned_to(x, 16);
  a.words = aligned_to(in, 4);
  const TeamShape shape = team_shape(count, chunk);
  BAGUA_LAUNCH(sign_decompress_kernel, static_cast<unsigned>(shape.blocks), shape.block_threads(), 0,
               static_cast<cudaStream_t>(stream), a);
  check("CUDA sign decompress");
}

void sign_decompress(const uint8_t* in, size_t count, size_t chunk, float* x, void* stream) {
  sign_expand(in, count, chunk, x, false, stream);
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
  BAGUA_LAUNCH(gossip_difference_kernel, blocks_for(count), 256, 0, static_cast<cudaStream_t>(stream), diff, x, self, r,
               nreplicas, self_weight, count);
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
      BAGUA_LAUNCH(cast_ef_kernel, blocks_for(count), 256, 0, s, x, error, count, reinterpret_cast<uint16_t*>(out),
                   fp16);
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
    case BAGUA_COMPRESS_SIGN: sign_expand(in, count, spec.format.chunk, out, accumulate, stream); return;
    case BAGUA_COMPRESS_FP16:
    case BAGUA_COMPRESS_BF16: {
      const bool fp16 = spec.kind == BAGUA_COMPRESS_FP16;
      if (!accumulate) {
        cast_to_float(in, fp16 ? BAGUA_FLOAT16 : BAGUA_BFLOAT16, count, out, stream);
        return;
      }
      BAGUA_LAUNCH(cast_accumulate_kernel, blocks_for(count), 256, 0, s, reinterpret_cast<const uint16_t*>(in), count,
                   out, fp16);
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
  BAGUA_LAUNCH(cast_from_kernel, blocks_for(count), 256, 0, static_cast<cudaStream_t>(stream), in, count,
               static_cast<uint16_t*>(out), dtype == BAGUA_FLOAT16);
  check("CUDA cast");
}

void cast_to_float(const void* in, bagua_datatype_t dtype, size_t count, float* out, void* stream) {
  if (dtype != BAGUA_FLOAT16 && dtype != BAGUA_BFLOAT16)
    fail(BAGUA_ERR_INVALID_ARGUMENT, "casts come from float16 or bfloat16");
  if (count == 0) return;
  BAGUA_LAUNCH(cast_to_kernel, blocks_for(count), 256, 0, static_cast<cudaStream_t>(stream),
               static_cast<const uint16_t*>(in), count, out, dtype == BAGUA_FLOAT16);
  check("CUDA cast");
}

void bagua_u8_compress(const float* x, size_t count, uint8_t* out, void* stream) {
  if (count == 0) return;
  auto s = static_cast<cudaStream_t>(stream);
  BAGUA_LAUNCH(u8_range_kernel, 1, 256, 0, s, x, count, out);
  BAGUA_LAUNCH(u8_codes_kernel, blocks_for(count), 256, 0, s, x, count, out);
  check("CUDA MinMaxUInt8 compress");
}

void bagua_u8_decompress(const uint8_t* in, size_t count, float* x, void* stream) {
  if (count == 0) return;
  BAGUA_LAUNCH(u8_decode_kernel, blocks_for(count), 256, 0, static_cast<cudaStream_t>(stream), in, count, x);
  check("CUDA MinMaxUInt8 decompress");
}

void load_extra_kernels() {
  cudaFuncAttributes attrs;
  if (cudaFuncGetAttributes(&attrs, sign_compress_kernel) != cudaSuccess ||
      cudaFuncGetAttributes(&attrs, sign_decompress_kernel) != cudaSuccess ||
      cudaFuncGetAttributes(&attrs, cast_ef_kernel) != cudaSuccess ||
      cudaFuncGetAttributes(&attrs, cast_accumulate_kernel) != cudaSuccess ||
      cudaFuncGetAttributes(&attrs, cast_from_kernel) != cudaSuccess ||
      cudaFuncGetAttributes(&attrs, cast_to_kernel) != cudaSuccess ||
      cudaFuncGetAttributes(&attrs, gossip_difference_kernel) != cudaSuccess)
    check("loading the CUDA compression kernels");
}

}  // namespace bagua::cuda

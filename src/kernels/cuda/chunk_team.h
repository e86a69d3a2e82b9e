// The thread layout of the chunked CUDA compression kernels (min-max, sign): a team of threads per chunk, each
// thread holding kQuadsPerThread quads (4 consecutive elements) in registers, loaded with one wide access where
// the buffer allows. Quad q = thread + k * team_threads covers elements [4q, 4q + 4) of its chunk; a team is a
// whole number of warps, so a warp's 32 quads are 128 consecutive elements and their b-bit codes fill 4b whole
// 32-bit words (put together with shuffles, no shared memory). Only for .cu files.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "bagua/bagua.h"
#include "kernels/half.h"

namespace bagua::cuda {

constexpr int kQuadsPerThread = 2;
constexpr unsigned kMaxTeamThreads = 512;  // a 4096-element chunk
constexpr unsigned kBlockThreads = 256;    // smaller teams share a block
constexpr unsigned kFullWarp = 0xffffffffu;

struct TeamShape {
  unsigned team_threads;     // a multiple of 32, covering the chunk with kQuadsPerThread quads each
  unsigned teams_per_block;  // block size: team_threads * teams_per_block
  size_t blocks;

  unsigned block_threads() const { return team_threads * teams_per_block; }
};

// chunk: 1 to 4096 elements.
inline TeamShape team_shape(size_t count, size_t chunk) {
  size_t quads = (chunk + 3) / 4;
  size_t threads = (quads + kQuadsPerThread - 1) / kQuadsPerThread;
  unsigned team = static_cast<unsigned>((threads + 31) / 32 * 32);
  unsigned per_block = team >= kBlockThreads ? 1 : kBlockThreads / team;
  size_t chunks = (count + chunk - 1) / chunk;
  return TeamShape{team, per_block, (chunks + per_block - 1) / per_block};
}

inline bool aligned_to(const void* p, size_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

// The chunk this thread works on; len 0 for teams past the last chunk (they still reach every __syncthreads).
struct Team {
  unsigned thread;  // index in the team
  unsigned index;   // team index in the block
  size_t chunk;     // chunk number
  size_t begin;     // its first element
  size_t len;       // its elements
};

__device__ inline Team this_team(size_t count, size_t chunk, unsigned team_threads) {
  Team t;
  t.thread = threadIdx.x % team_threads;
  t.index = threadIdx.x / team_threads;
  t.chunk = static_cast<size_t>(blockIdx.x) * (blockDim.x / team_threads) + t.index;
  t.begin = t.chunk * chunk;
  t.len = t.begin < count ? (count - t.begin < chunk ? count - t.begin : chunk) : 0;
  return t;
}

// Elements of quad q that lie in a chunk of len elements: 0 to 4.
__device__ inline int quad_valid(size_t q, size_t len) {
  size_t first = 4 * q;
  return first >= len ? 0 : (len - first >= 4 ? 4 : static_cast<int>(len - first));
}

// Loads `valid` elements from element `first` of x (float32, float16 or bfloat16) as floats, the rest 0. wide: the
// elements of whole quads may be read with one 16-byte (float) or 8-byte (half) access.
__device__ inline void load_quad(const void* x, bagua_datatype_t dtype, size_t first, int valid, bool wide,
                                 float v[4]) {
  if (dtype == BAGUA_FLOAT32) {
    const float* p = static_cast<const float*>(x) + first;
    if (wide && valid == 4) {
      float4 w = *reinterpret_cast<const float4*>(p);
      v[0] = w.x, v[1] = w.y, v[2] = w.z, v[3] = w.w;
      return;
    }
#pragma unroll
    for (int m = 0; m < 4; ++m) v[m] = m < valid ? p[m] : 0.0f;
    return;
  }
  const uint16_t* p = static_cast<const uint16_t*>(x) + first;
  uint16_t h[4] = {0, 0, 0, 0};
  if (wide && valid == 4) {
    uint2 w = *reinterpret_cast<const uint2*>(p);
    h[0] = static_cast<uint16_t>(w.x), h[1] = static_cast<uint16_t>(w.x >> 16);
    h[2] = static_cast<uint16_t>(w.y), h[3] = static_cast<uint16_t>(w.y >> 16);
  } else {
#pragma unroll
    for (int m = 0; m < 4; ++m) h[m] = m < valid ? p[m] : 0;
  }
#pragma unroll
  for (int m = 0; m < 4; ++m)
    v[m] = m >= valid ? 0.0f : dtype == BAGUA_FLOAT16 ? fp16_to_float(h[m]) : bf16_to_float(h[m]);
}

__device__ inline void store_quad(void* x, bagua_datatype_t dtype, size_t first, int valid, bool wide,
                                  const float v[4]) {
  if (dtype == BAGUA_FLOAT32) {
    float* p = static_cast<float*>(x) + first;
    if (wide && valid == 4) {
      *reinterpret_cast<float4*>(p) = make_float4(v[0], v[1], v[2], v[3]);
      return;
    }
#pragma unroll
    for (int m = 0; m < 4; ++m)
      if (m < valid) p[m] = v[m];
    return;
  }
  uint16_t h[4];
#pragma unroll
  for (int m = 0; m < 4; ++m) h[m] = dtype == BAGUA_FLOAT16 ? float_to_fp16(v[m]) : float_to_bf16(v[m]);
  uint16_t* p = static_cast<uint16_t*>(x) + first;
  if (wide && valid == 4) {
    *reinterpret_cast<uint2*>(p) =
        make_uint2(h[0] | static_cast<uint32_t>(h[1]) << 16, h[2] | static_cast<uint32_t>(h[3]) << 16);
    return;
  }
#pragma unroll
  for (int m = 0; m < 4; ++m)
    if (m < valid) p[m] = h[m];
}

// b-bit codes: quad q's 4b bits start at bit 4bq of the chunk's code words.
template <int Bits>
constexpr int kQuadsPerWord = 8 / Bits;
template <int Bits>
constexpr uint32_t kQuadMask = Bits == 8 ? 0xffffffffu : (1u << (4 * (Bits % 8))) - 1;

// The 4b code bits of quad q. words: codes is 4-byte aligned (read whole words).
template <int Bits>
__device__ inline uint32_t load_quad_codes(const uint8_t* codes, size_t q, bool words) {
  constexpr int kPerWord = kQuadsPerWord<Bits>;
  const unsigned shift = static_cast<unsigned>(q % kPerWord) * 4 * Bits;
  if (words) return (reinterpret_cast<const uint32_t*>(codes)[q / kPerWord] >> shift) & kQuadMask<Bits>;
  const uint8_t* w = codes + q / kPerWord * 4;
  uint32_t word =
      w[0] | static_cast<uint32_t>(w[1]) << 8 | static_cast<uint32_t>(w[2]) << 16 | static_cast<uint32_t>(w[3]) << 24;
  return (word >> shift) & kQuadMask<Bits>;
}

// Puts the warp's quad codes together: every lane passes its quad's 4b bits, and the first lane of each group of
// kQuadsPerWord lanes gets the whole word for quad q / kQuadsPerWord. Every lane of the warp must call it.
template <int Bits>
__device__ inline uint32_t gather_code_word(uint32_t quad_codes) {
  constexpr int kPerWord = kQuadsPerWord<Bits>;
  const unsigned lane = threadIdx.x % 32;
  uint32_t word = quad_codes << ((lane % kPerWord) * 4 * Bits);
  for (int offset = 1; offset < kPerWord; offset *= 2) word |= __shfl_xor_sync(kFullWarp, word, offset);
  return word;
}

// Stores the word of quad q (from gather_code_word) if this lane leads its group and the word lies within
// code_bytes (a multiple of 4).
template <int Bits>
__device__ inline void store_code_word(uint8_t* codes, size_t q, uint32_t word, size_t code_bytes, bool words) {
  constexpr int kPerWord = kQuadsPerWord<Bits>;
  if ((threadIdx.x % 32) % kPerWord != 0 || q / kPerWord * 4 >= code_bytes) return;
  if (words) {
    reinterpret_cast<uint32_t*>(codes)[q / kPerWord] = word;
    return;
  }
  uint8_t* w = codes + q / kPerWord * 4;
  for (int k = 0; k < 4; ++k) w[k] = static_cast<uint8_t>(word >> (8 * k));
}

__device__ inline float load_float(const uint8_t* p, bool words) {
  if (words) return *reinterpret_cast<const float*>(p);
  return bits_float(p[0] | static_cast<uint32_t>(p[1]) << 8 | static_cast<uint32_t>(p[2]) << 16 |
                    static_cast<uint32_t>(p[3]) << 24);
}

__device__ inline void store_float(uint8_t* p, float f, bool words) {
  if (words) {
    *reinterpret_cast<float*>(p) = f;
    return;
  }
  uint32_t u = float_bits(f);
  for (int k = 0; k < 4; ++k) p[k] = static_cast<uint8_t>(u >> (8 * k));
}

}  // namespace bagua::cuda

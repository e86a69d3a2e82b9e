// The arithmetic of min-max quantization that CPU and CUDA must share bit for bit: the stochastic draw and
// the grid of a chunk. __host__ __device__ under nvcc.
#pragma once

#include <cstdint>

#include "kernels/half.h"

namespace bagua {

// Any NaN becomes the canonical quiet NaN 0x7fc00000. NVIDIA's arithmetic returns that NaN whatever its operands,
// x86 keeps an operand's bits: every kernel output that arithmetic can make NaN goes through this.
BAGUA_HD inline float canonical_float(float x) { return x != x ? bits_float(0x7fc00000u) : x; }

// A chunk's min and max are written with +0 for either zero: reductions in different orders (lanes, threads) may
// keep either sign when both occur, and the grid does not depend on it.
BAGUA_HD inline float unsigned_zero(float x) { return x == 0.0f ? 0.0f : x; }

BAGUA_HD inline uint64_t splitmix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Stochastic rounding draw v2 (docs/formats.md): a 32-bit key per (seed, step, rank, index / 2^32), made once per
// run of elements, then one 32-bit hash per element: two 32-bit multiplies, which vectorize on any processor.
BAGUA_HD inline uint32_t draw_key(uint64_t seed, uint64_t step, uint32_t rank, uint64_t index_high) {
  uint64_t h =
      splitmix64(seed ^ splitmix64(step ^ splitmix64((static_cast<uint64_t>(rank) << 40) ^ splitmix64(index_high))));
  return static_cast<uint32_t>(h >> 32);
}

// A bijective 32-bit mixer (xor-shift / multiply, two rounds).
BAGUA_HD inline uint32_t mix32(uint32_t x) {
  x ^= x >> 16;
  x *= 0x21f0aaadu;
  x ^= x >> 15;
  x *= 0x735a2d97u;
  x ^= x >> 15;
  return x;
}

// u in [0, 1) with 24 random bits (exact in fp32) for the element whose index has low 32 bits index_low.
BAGUA_HD inline float keyed_draw(uint32_t key, uint32_t index_low) {
  return static_cast<float>(mix32(index_low ^ key) >> 8) * (1.0f / 16777216.0f);
}

// The draw of one element, keyed by (seed, step, rank, element index).
BAGUA_HD inline float rounding_draw(uint64_t seed, uint64_t step, uint32_t rank, uint64_t index) {
  return keyed_draw(draw_key(seed, step, rank, index >> 32), static_cast<uint32_t>(index));
}

}  // namespace bagua

// The arithmetic of min-max quantization that CPU and CUDA must share bit for bit: the stochastic draw and
// the grid of a chunk. __host__ __device__ under nvcc.
#pragma once

#include <cstdint>

#include "kernels/half.h"

namespace bagua {

// Any NaN becomes the canonical quiet NaN 0x7fc00000. NVIDIA's arithmetic returns that NaN whatever its operands,
// x86 keeps an operand's bits: every kernel output that arithmetic can make NaN goes through this.
BAGUA_HD inline float canonical_float(float x) { return x != x ? bits_float(0x7fc00000u) : x; }

BAGUA_HD inline uint64_t splitmix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// u in [0, 1) with 24 random bits (exact in fp32), keyed by (seed, step, rank, element index).
BAGUA_HD inline float rounding_draw(uint64_t seed, uint64_t step, uint32_t rank, uint64_t index) {
  uint64_t h =
      splitmix64(seed ^ splitmix64(step ^ splitmix64((static_cast<uint64_t>(rank) << 40) ^ splitmix64(index))));
  return static_cast<float>(h >> 40) * (1.0f / 16777216.0f);
}

}  // namespace bagua

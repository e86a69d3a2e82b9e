// The arithmetic of min-max quantization that CPU and CUDA must share bit for bit: the stochastic draw and
// the grid of a chunk. __host__ __device__ under nvcc.
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/half.h"

namespace bagua {

// Any NaN becomes the canonical quiet NaN 0x7fc00000. NVIDIA's arithmetic returns that NaN whatever its operands,
// x86 keeps an operand's bits: every kernel output that arithmetic can make NaN goes through this.
BAGUA_HD inline float canonical_float(float x) { return x != x ? bits_float(0x7fc00000u) : x; }

// An error-feedback residual as stored: a non-finite one (the input held Inf or NaN, or its difference overflowed)
// becomes 0, so one bad step (an fp16 overflow under a loss scaler) does not poison every later call.
BAGUA_HD inline float feedback_residual(float x) { return x - x == 0.0f ? x : 0.0f; }

// A chunk's min and max are written with +0 for either zero: reductions in different orders (lanes, threads) may
// keep either sign when both occur, and the grid does not depend on it.
BAGUA_HD inline float unsigned_zero(float x) { return x == 0.0f ? 0.0f : x; }

// BAGUA's uint8 code of rint(x * scale) on the grid [lower, lower + 255]: clamped into [0, 255] before the
// conversion (a float outside the type's range converts differently on x86 and NVIDIA, and is undefined in C++:
// upper - lower reaches 256 once max * scale passes 2^24, e.g. for a constant tensor). NaN gives 255, as BAGUA's
// min(code, upper) did.
BAGUA_HD inline uint8_t u8_code(float scaled, float lower) {
  const float q = scaled - lower;
  return static_cast<uint8_t>(q < 0.0f ? 0.0f : (q <= 255.0f ? q : 255.0f));
}

BAGUA_HD inline uint64_t splitmix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Stochastic rounding draw v3 (docs/formats.md). A 32-bit key per (seed, step, rank, index / 2^32), made once per
// run of elements, as in v2; then one 32-bit hash per pair of elements (two multiplies), whose 16-bit halves are
// the pair's draws. Vector loops hash 32 elements' draws with one 16-lane vector.
BAGUA_HD inline uint32_t draw_key(uint64_t seed, uint64_t step, uint32_t rank, uint64_t index_high) {
  uint64_t h =
      splitmix64(seed ^ splitmix64(step ^ splitmix64((static_cast<uint64_t>(rank) << 40) ^ splitmix64(index_high))));
  return static_cast<uint32_t>(h >> 32);
}

// A bijective 32-bit mixer: multiply, xor-shift, twice. Its input is the pair's number plus the key.
BAGUA_HD inline uint32_t pair_hash(uint32_t x) {
  x *= 0x21f0aaadu;
  x ^= x >> 15;
  x *= 0x735a2d97u;
  x ^= x >> 15;
  return x;
}

// r in [0, 2^16) for the element whose index has low 32 bits index_low. Elements i and i + 16 of each aligned block
// of 32 indices share a pair: the low half of its hash is the first's draw, the high half the second's.
BAGUA_HD inline uint32_t keyed_draw16(uint32_t key, uint32_t index_low) {
  uint32_t h = pair_hash((((index_low >> 5) << 4) | (index_low & 15u)) + key);
  return (index_low & 16u) ? h >> 16 : h & 0xffffu;
}

// The draw of one element, keyed by (seed, step, rank, element index).
BAGUA_HD inline uint32_t rounding_draw16(uint64_t seed, uint64_t step, uint32_t rank, uint64_t index) {
  return keyed_draw16(draw_key(seed, step, rank, index >> 32), static_cast<uint32_t>(index));
}

// The stochastic code of s = (x - min) * inv_step with draw r: floor((rint(s * 2^16) + r) / 2^16), at most top.
// Its mean over r is rint(s * 2^16) / 2^16, within 2^-17 of s. s >= 0, or NaN where a range that overflows has
// step 0 (x - min = Inf): code 0.
BAGUA_HD inline int32_t stochastic_code(float s, uint32_t r, int32_t top) {
  float fixed = s * 65536.0f;
  if (fixed != fixed) return 0;
  int32_t code = (static_cast<int32_t>(rintf(fixed)) + static_cast<int32_t>(r)) >> 16;
  return code < top ? code : top;
}

}  // namespace bagua

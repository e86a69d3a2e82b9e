// fp16 (IEEE binary16) and bf16 <-> fp32 conversions, round to nearest even, NaN kept quiet.
// Integer arithmetic only, so the CPU and CUDA (these compile as __host__ __device__) give the same bits.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define BAGUA_HD __host__ __device__
#else
#define BAGUA_HD
#endif

namespace bagua {

BAGUA_HD inline uint32_t float_bits(float f) {
  uint32_t u;
  __builtin_memcpy(&u, &f, 4);
  return u;
}
BAGUA_HD inline float bits_float(uint32_t u) {
  float f;
  __builtin_memcpy(&f, &u, 4);
  return f;
}

BAGUA_HD inline float bf16_to_float(uint16_t h) { return bits_float(static_cast<uint32_t>(h) << 16); }

BAGUA_HD inline uint16_t float_to_bf16(float f) {
  uint32_t u = float_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // NaN stays a quiet NaN
  u += 0x7fffu + ((u >> 16) & 1);  // round to nearest, ties to even
  return static_cast<uint16_t>(u >> 16);
}

BAGUA_HD inline float fp16_to_float(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0x1f) return bits_float(sign | 0x7f800000u | (mant << 13));  // Inf / NaN
  if (exp == 0) {
    if (mant == 0) return bits_float(sign);
    // Subnormal: value = mant * 2^-24, exact in fp32.
    float v = static_cast<float>(mant) * (1.0f / 16777216.0f);
    return sign ? -v : v;
  }
  return bits_float(sign | ((exp + 112) << 23) | (mant << 13));
}

BAGUA_HD inline uint16_t float_to_fp16(float f) {
  uint32_t u = float_bits(f);
  uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u | ((abs >> 13) & 0x3ffu));  // quiet NaN
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to >= 65520: Inf
  if (abs < 0x38800000u) {
    // Result is subnormal in fp16 (or zero): round abs * 2^24 to an integer, ties to even.
    float scaled = bits_float(abs) * 16777216.0f;  // exact: a power-of-two scale
    uint32_t whole = static_cast<uint32_t>(scaled);
    float frac = scaled - static_cast<float>(whole);
    if (frac > 0.5f || (frac == 0.5f && (whole & 1))) ++whole;
    return static_cast<uint16_t>(sign | whole);
  }
  // Normal: drop 13 mantissa bits with round to nearest even; a carry into the exponent is correct.
  uint32_t rebased = abs - (112u << 23);
  rebased += 0xfffu + ((rebased >> 13) & 1);
  return static_cast<uint16_t>(sign | (rebased >> 13));
}

}  // namespace bagua

// Hand-written vector loops of the min-max and sign kernels: AVX-512 (quantize_avx512.cc, -mavx512f/bw/vl) and AVX2
// (quantize_avx2.cc, -mavx2), chosen with the reductions (cpu_kernels(); BAGUA_CPU_KERNELS may lower it). Each does
// the same operations in the same order as the portable loops in quantize.cc and compress_extra.cc, so every path
// gives the same bits (tests/unit/test_kernel_reference.cc). Each returns how many leading elements it handled; the
// caller finishes the rest with the portable loop.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <type_traits>

// The portable loops are compiled once per ISA and picked at load time (target_clones). Not under ThreadSanitizer:
// the clones' resolvers run during relocation, before its runtime has started, and crash there.
#if defined(__SANITIZE_THREAD__)
#define BAGUA_ISA_CLONES
#else
#define BAGUA_ISA_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#endif

namespace bagua {

// One chunk's finite grid and rounding. Stochastic: r = keyed_draw16(draw_key, first_index + i), first_index + len
// must not pass 2^32, and inv_step * 2^16 must be finite.
struct EncodeGrid {
  int bits;
  float min, step, inv_step;
  bool stochastic;
  uint32_t draw_key, first_index;
};

struct VectorLoops {
  // Min, max and "any non-finite" of v[0, len).
  void (*min_max)(const float* v, size_t len, float* lo, float* hi, bool* finite);
  // One chunk's codes, packed LSB-first (docs/formats.md "minmax v1"). With error (not NULL):
  // error[i] = canonical(t[i] - (min + code * step)).
  size_t (*encode_chunk)(const float* t, size_t len, const EncodeGrid& grid, uint8_t* codes, float* error);
  // out[i] = min + code_i * step, or out[i] = canonical(out[i] + that) when accumulating.
  size_t (*decode_chunk)(const uint8_t* codes, size_t len, int bits, float min, float step, float* out,
                         bool accumulate);
  // Sum of (x + e)^2 in fp64 with eight lanes (compress_extra.cc's order) for four equal chunks at once
  // (independent chains, so the adds' latency overlaps). e may be NULL.
  void (*sign_sum_squares4)(const float* x, const float* e, size_t chunk, double sums[4]);
  // Sign bits of t = x + e, LSB first (e may be NULL, else e = canonical(t - +-scale)).
  size_t (*sign_pack)(const float* x, float* e, size_t len, float scale, uint8_t* bits);
  // x[i] = +-scale from the bits, or x[i] + that when accumulating; canonical NaN.
  size_t (*sign_expand)(const uint8_t* bits, size_t len, float scale, float* x, bool accumulate);
};

extern const VectorLoops kAvx512Loops;
extern const VectorLoops kAvx2Loops;

// The loops of cpu_kernels()'s choice; nullptr on the baseline (portable loops only).
const VectorLoops* vector_loops();

// Shared by the vector loops' files.
// Calls f(std::integral_constant<int, bits>) for bits in {8, 4, 2, 1} (1 for anything else).
template <typename F>
auto with_bits(int bits, F&& f) {
  switch (bits) {
    case 8: return f(std::integral_constant<int, 8>{});
    case 4: return f(std::integral_constant<int, 4>{});
    case 2: return f(std::integral_constant<int, 2>{});
    default: return f(std::integral_constant<int, 1>{});
  }
}
// min_max after the vector part: the elements from i on, then "finite" (NaN from the vector mask, an infinity
// from the min or the max, which min and max keep while they may drop a NaN).
inline void finish_min_max(const float* v, size_t i, size_t len, float a, float b, bool nan, float* lo, float* hi,
                           bool* finite) {
  for (; i < len; ++i) {
    nan |= std::isnan(v[i]);
    a = v[i] < a ? v[i] : a;
    b = v[i] > b ? v[i] : b;
  }
  *lo = a;
  *hi = b;
  *finite = !(nan || (len > 0 && (std::isinf(a) || std::isinf(b))));
}
// sign_sum_squares4 after the vector part: chunk c's elements from i on into their lanes, then the lanes in order.
inline double finish_sign_sum(double lane[8], const float* x, const float* e, size_t chunk, int c, size_t i) {
  for (size_t j = i; j < chunk; ++j) {
    const size_t at = static_cast<size_t>(c) * chunk + j;
    double t = static_cast<double>(x[at] + (e ? e[at] : 0.0f));
    lane[j % 8] += t * t;
  }
  double sum = 0;
  for (int l = 0; l < 8; ++l) sum += lane[l];
  return sum;
}

}  // namespace bagua

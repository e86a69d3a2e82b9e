// AVX-512 loops of the min-max and sign kernels (see quantize_simd.h). Codes are made sixteen at a time as int32
// lanes, then packed 64 at a time: 8 bits by truncation to bytes, 4 and 2 bits by multiply-adds of neighbouring
// bytes, 1 bit straight from a compare mask. Decoding looks the value up in a 16-entry table of min + k * step.
#include "kernels/cpu/quantize_simd.h"

// GCC 12's AVX-512 headers trip -Wuninitialized on their own _mm512_undefined_* helpers.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/quantize_math.h"

namespace bagua {

namespace {

// Both passes over a chunk ask for the input this far ahead, so that memory streams in while they compute.
constexpr size_t kPrefetchBytes = 8192;

inline __m512 canonical(__m512 v) {
  return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), v,
                              _mm512_castsi512_ps(_mm512_set1_epi32(0x7fc00000)));
}

// keyed_draw (quantize_math.h) for sixteen consecutive indices.
inline __m512 draws16(__m512i key, uint32_t first) {
  const __m512i iota = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  __m512i h = _mm512_xor_si512(_mm512_add_epi32(_mm512_set1_epi32(static_cast<int>(first)), iota), key);
  h = _mm512_xor_si512(h, _mm512_srli_epi32(h, 16));
  h = _mm512_mullo_epi32(h, _mm512_set1_epi32(0x21f0aaad));
  h = _mm512_xor_si512(h, _mm512_srli_epi32(h, 15));
  h = _mm512_mullo_epi32(h, _mm512_set1_epi32(0x735a2d97));
  h = _mm512_xor_si512(h, _mm512_srli_epi32(h, 15));
  return _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_srli_epi32(h, 8)), _mm512_set1_ps(1.0f / 16777216.0f));
}

template <int Bits, bool Stochastic, bool Feedback>
size_t encode(const float* t, size_t len, const EncodeGrid& g, uint8_t* codes, float* error) {
  const __m512 vmin = _mm512_set1_ps(g.min), vinv = _mm512_set1_ps(g.inv_step), vstep = _mm512_set1_ps(g.step);
  const __m512i top_int = _mm512_set1_epi32((1 << Bits) - 1);
  const __m512i key = _mm512_set1_epi32(static_cast<int>(g.draw_key));
  size_t i = 0;
  for (; i + 64 <= len; i += 64) {
    __m512i c[4];
    for (int k = 0; k < 4; ++k) {
      const size_t at = i + 16 * static_cast<size_t>(k);
      _mm_prefetch(reinterpret_cast<const char*>(t + at) + kPrefetchBytes, _MM_HINT_T0);
      __m512 x = _mm512_loadu_ps(t + at);
      __m512 s = _mm512_mul_ps(_mm512_sub_ps(x, vmin), vinv);
      if constexpr (Stochastic) {
        // floor(s + u) is the truncating conversion (s + u >= 0), clamped to the top code.
        __m512 u = draws16(key, g.first_index + static_cast<uint32_t>(at));
        c[k] = _mm512_min_epi32(_mm512_cvttps_epi32(_mm512_add_ps(s, u)), top_int);
      } else {
        // Ties to even, as rint; s >= 0 and below 2^31, so clamping the integer equals clamping the float.
        c[k] = _mm512_min_epi32(_mm512_cvt_roundps_epi32(s, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC), top_int);
      }
      if constexpr (Feedback) {
        __m512 deq = _mm512_add_ps(vmin, _mm512_mul_ps(_mm512_cvtepi32_ps(c[k]), vstep));
        _mm512_storeu_ps(error + at, canonical(_mm512_sub_ps(x, deq)));
      }
    }
    uint8_t* out = codes + i * Bits / 8;
    if constexpr (Bits == 1) {
      for (int k = 0; k < 4; ++k) {
        // > 0, not != 0: an element whose t is NaN (a range that overflows, step 0) has code INT_MIN, packed as 0
        uint16_t m = _mm512_cmpgt_epi32_mask(c[k], _mm512_setzero_si512());
        std::memcpy(out + 2 * k, &m, 2);
      }
    } else if constexpr (Bits == 8) {
      // Saturating packs work within 128-bit lanes; the permutation puts the 64 bytes back in element order.
      __m512i bytes = _mm512_packus_epi16(_mm512_packs_epi32(c[0], c[1]), _mm512_packs_epi32(c[2], c[3]));
      const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
      _mm512_storeu_si512(out, _mm512_permutexvar_epi32(order, bytes));
    } else {
      __m512i bytes = _mm512_castsi128_si512(_mm512_cvtepi32_epi8(c[0]));
      bytes = _mm512_inserti32x4(bytes, _mm512_cvtepi32_epi8(c[1]), 1);
      bytes = _mm512_inserti32x4(bytes, _mm512_cvtepi32_epi8(c[2]), 2);
      bytes = _mm512_inserti32x4(bytes, _mm512_cvtepi32_epi8(c[3]), 3);
      if constexpr (Bits == 4) {
        __m512i pairs = _mm512_maddubs_epi16(bytes, _mm512_set1_epi16(0x1001));  // c0 + 16 c1
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), _mm512_cvtepi16_epi8(pairs));
      } else {
        __m512i pairs = _mm512_maddubs_epi16(bytes, _mm512_set1_epi16(0x0401));   // c0 + 4 c1
        __m512i quads = _mm512_madd_epi16(pairs, _mm512_set1_epi32(0x00100001));  // + 16 (c2 + 4 c3)
        _mm_storeu_si128(reinterpret_cast<__m128i*>(out), _mm512_cvtepi32_epi8(quads));
      }
    }
  }
  return i;
}

template <int Bits, bool Stochastic>
size_t encode_with(const float* t, size_t len, const EncodeGrid& g, uint8_t* codes, float* error) {
  return error ? encode<Bits, Stochastic, true>(t, len, g, codes, error)
               : encode<Bits, Stochastic, false>(t, len, g, codes, error);
}

template <int Bits>
size_t encode_bits(const float* t, size_t len, const EncodeGrid& g, uint8_t* codes, float* error) {
  return g.stochastic ? encode_with<Bits, true>(t, len, g, codes, error)
                      : encode_with<Bits, false>(t, len, g, codes, error);
}

// Sixteen codes of Bits bits as the low bits of int32 lanes (higher bits hold later codes: the table ignores them).
template <int Bits>
inline __m512i codes16(const uint8_t* in) {
  if constexpr (Bits == 4) {
    uint32_t lo, hi;
    std::memcpy(&lo, in, 4);
    std::memcpy(&hi, in + 4, 4);
    __m512i w = _mm512_mask_blend_epi32(0xff00, _mm512_set1_epi32(static_cast<int>(lo)),
                                        _mm512_set1_epi32(static_cast<int>(hi)));
    return _mm512_srlv_epi32(w, _mm512_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28, 0, 4, 8, 12, 16, 20, 24, 28));
  } else if constexpr (Bits == 2) {
    uint32_t w;
    std::memcpy(&w, in, 4);
    return _mm512_srlv_epi32(_mm512_set1_epi32(static_cast<int>(w)),
                             _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30));
  } else {
    uint16_t w;
    std::memcpy(&w, in, 2);
    return _mm512_srlv_epi32(_mm512_set1_epi32(w),
                             _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
  }
}

template <int Bits, bool Accumulate>
size_t decode(const uint8_t* in, size_t len, float min, float step, float* out) {
  size_t i = 0;
  if constexpr (Bits == 8) {
    const __m512 vmin = _mm512_set1_ps(min), vstep = _mm512_set1_ps(step);
    for (; i + 16 <= len; i += 16) {
      __m512i c = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i)));
      __m512 v = _mm512_add_ps(vmin, _mm512_mul_ps(_mm512_cvtepi32_ps(c), vstep));
      if constexpr (Accumulate) v = canonical(_mm512_add_ps(_mm512_loadu_ps(out + i), v));
      _mm512_storeu_ps(out + i, v);
    }
  } else {
    // table[k] = min + (k mod 2^Bits) * step, the portable loop's arithmetic.
    alignas(64) float table[16];
    for (int k = 0; k < 16; ++k) table[k] = min + static_cast<float>(k & ((1 << Bits) - 1)) * step;
    const __m512 values = _mm512_load_ps(table);
    for (; i + 16 <= len; i += 16) {
      __m512 v = _mm512_permutexvar_ps(codes16<Bits>(in + i * Bits / 8), values);
      if constexpr (Accumulate) v = canonical(_mm512_add_ps(_mm512_loadu_ps(out + i), v));
      _mm512_storeu_ps(out + i, v);
    }
  }
  return i;
}

template <int Bits>
size_t decode_bits(const uint8_t* in, size_t len, float min, float step, float* out, bool accumulate) {
  return accumulate ? decode<Bits, true>(in, len, min, step, out) : decode<Bits, false>(in, len, min, step, out);
}

void min_max(const float* v, size_t len, float* lo, float* hi, bool* finite) {
  __m512 mn = _mm512_set1_ps(std::numeric_limits<float>::infinity());
  __m512 mx = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  __mmask16 nan = 0;
  size_t i = 0;
  for (; i + 16 <= len; i += 16) {
    _mm_prefetch(reinterpret_cast<const char*>(v + i) + kPrefetchBytes, _MM_HINT_T0);
    __m512 x = _mm512_loadu_ps(v + i);
    nan |= _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
    mn = _mm512_min_ps(mn, x);
    mx = _mm512_max_ps(mx, x);
  }
  float a = _mm512_reduce_min_ps(mn), b = _mm512_reduce_max_ps(mx);
  finish_min_max(v, i, len, a, b, nan != 0, lo, hi, finite);
}

size_t encode_chunk(const float* t, size_t len, const EncodeGrid& g, uint8_t* codes, float* error) {
  return with_bits(g.bits, [&](auto b) { return encode_bits<decltype(b)::value>(t, len, g, codes, error); });
}

size_t decode_chunk(const uint8_t* codes, size_t len, int bits, float min, float step, float* out, bool accumulate) {
  return with_bits(bits,
                   [&](auto b) { return decode_bits<decltype(b)::value>(codes, len, min, step, out, accumulate); });
}

void sign_sum_squares4(const float* x, const float* e, size_t chunk, double sums[4]) {
  __m512d acc[4] = {_mm512_setzero_pd(), _mm512_setzero_pd(), _mm512_setzero_pd(), _mm512_setzero_pd()};
  size_t i = 0;
  for (; i + 8 <= chunk; i += 8)
    for (int c = 0; c < 4; ++c) {
      const size_t at = static_cast<size_t>(c) * chunk + i;
      __m256 t = _mm256_loadu_ps(x + at);
      if (e) t = _mm256_add_ps(t, _mm256_loadu_ps(e + at));
      __m512d d = _mm512_cvtps_pd(t);
      acc[c] = _mm512_add_pd(acc[c], _mm512_mul_pd(d, d));
    }
  for (int c = 0; c < 4; ++c) {
    alignas(64) double lane[8];
    _mm512_store_pd(lane, acc[c]);
    sums[c] = finish_sign_sum(lane, x, e, chunk, c, i);
  }
}

size_t sign_pack(const float* x, float* e, size_t len, float scale, uint8_t* bits) {
  const __m512 zero = _mm512_setzero_ps(), pos = _mm512_set1_ps(scale), neg = _mm512_set1_ps(-scale);
  size_t i = 0;
  for (; i + 16 <= len; i += 16) {
    __m512 t = _mm512_loadu_ps(x + i);
    if (e) t = _mm512_add_ps(t, _mm512_loadu_ps(e + i));
    __mmask16 positive = _mm512_cmp_ps_mask(t, zero, _CMP_NLT_UQ);  // !(t < 0): 0 and NaN count as +
    if (e) _mm512_storeu_ps(e + i, canonical(_mm512_sub_ps(t, _mm512_mask_blend_ps(positive, neg, pos))));
    uint16_t m = positive;
    std::memcpy(bits + i / 8, &m, 2);
  }
  return i;
}

size_t sign_expand(const uint8_t* bits, size_t len, float scale, float* x, bool accumulate) {
  const __m512 pos = _mm512_set1_ps(scale), neg = _mm512_set1_ps(-scale);
  size_t i = 0;
  for (; i + 16 <= len; i += 16) {
    uint16_t m;
    std::memcpy(&m, bits + i / 8, 2);
    __m512 v = _mm512_mask_blend_ps(m, neg, pos);
    if (accumulate) v = _mm512_add_ps(_mm512_loadu_ps(x + i), v);
    _mm512_storeu_ps(x + i, canonical(v));
  }
  return i;
}

}  // namespace

const VectorLoops kAvx512Loops{min_max, encode_chunk, decode_chunk, sign_sum_squares4, sign_pack, sign_expand};

}  // namespace bagua

#pragma GCC diagnostic pop

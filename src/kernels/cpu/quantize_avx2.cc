// AVX2 loops of the min-max and sign kernels (see quantize_simd.h), for processors without AVX-512: the same
// operations as quantize_avx512.cc on eight lanes. Codes are packed 32 at a time with saturating packs (8 bits),
// multiply-adds (4 and 2 bits) and sign masks (1 bit); decoding looks values up in an 8-entry table (two for
// 4 bits).
#include <immintrin.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/cpu/quantize_simd.h"

namespace bagua {

namespace {

// Both passes over a chunk ask for the input this far ahead, so that memory streams in while they compute.
constexpr size_t kPrefetchBytes = 8192;

inline __m256 canonical(__m256 v) {
  return _mm256_blendv_ps(v, _mm256_castsi256_ps(_mm256_set1_epi32(0x7fc00000)), _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
}

// feedback_residual (quantize_math.h): Inf and NaN lanes become 0.
inline __m256 finite_or_zero(__m256 v) {
  const __m256 magnitude = _mm256_and_ps(v, _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff)));
  return _mm256_and_ps(v, _mm256_cmp_ps(magnitude, _mm256_set1_ps(INFINITY), _CMP_LT_OQ));
}

// pair_hash (quantize_math.h) of eight keyed pairs (pair + key).
inline __m256i pair_hash8(__m256i pairs) {
  __m256i h = _mm256_mullo_epi32(pairs, _mm256_set1_epi32(0x21f0aaad));
  h = _mm256_xor_si256(h, _mm256_srli_epi32(h, 15));
  h = _mm256_mullo_epi32(h, _mm256_set1_epi32(0x735a2d97));
  return _mm256_xor_si256(h, _mm256_srli_epi32(h, 15));
}

// keyed_draw16 for eight consecutive indices from any first index (a chunk that does not start at a multiple of 32).
inline __m256i draws8_any(__m256i key, uint32_t first) {
  const __m256i index =
      _mm256_add_epi32(_mm256_set1_epi32(static_cast<int>(first)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  __m256i pair = _mm256_or_si256(_mm256_slli_epi32(_mm256_srli_epi32(index, 5), 4),
                                 _mm256_and_si256(index, _mm256_set1_epi32(15)));
  __m256i h = pair_hash8(_mm256_add_epi32(pair, key));
  return _mm256_and_si256(_mm256_srlv_epi32(h, _mm256_and_si256(index, _mm256_set1_epi32(16))),
                          _mm256_set1_epi32(0xffff));
}

// 32 int32 codes as 32 bytes in element order, saturated into [0, 255].
inline __m256i bytes32(const __m256i c[4]) {
  __m256i packed = _mm256_packus_epi16(_mm256_packs_epi32(c[0], c[1]), _mm256_packs_epi32(c[2], c[3]));
  return _mm256_permutevar8x32_epi32(packed, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

template <int Bits, bool Stochastic, bool Feedback, bool PairedDraws>
size_t encode(const float* t, size_t len, const EncodeGrid& g, uint8_t* codes, float* error) {
  const __m256 vmin = _mm256_set1_ps(g.min), vinv = _mm256_set1_ps(g.inv_step), vstep = _mm256_set1_ps(g.step);
  const __m256 fixed_scale = _mm256_set1_ps(g.inv_step * 65536.0f);  // finite: the caller checks
  const __m256i top_int = _mm256_set1_epi32((1 << Bits) - 1);
  const __m256i key = _mm256_set1_epi32(static_cast<int>(g.draw_key));
  // Paired draws: elements [i, i + 32) are the sixteen pairs from (first_index + i) / 2 (kept plus the key), eight
  // in each hash vector. The first covers elements 0-7 (low halves) and 16-23 (high halves), the second 8-15 and
  // 24-31.
  __m256i pairs = _mm256_add_epi32(_mm256_set1_epi32(static_cast<int>((g.first_index >> 1) + g.draw_key)),
                                   _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  size_t i = 0;
  for (; i + 32 <= len; i += 32) {
    __m256i c[4];
    __m256i draws[4];
    if constexpr (Stochastic && PairedDraws) {
      for (int k = 0; k < 2; ++k) {
        __m256i h = pair_hash8(pairs);
        pairs = _mm256_add_epi32(pairs, _mm256_set1_epi32(8));
        draws[k] = _mm256_and_si256(h, _mm256_set1_epi32(0xffff));
        draws[k + 2] = _mm256_srli_epi32(h, 16);
      }
    }
    for (int k = 0; k < 4; ++k) {
      const size_t at = i + 8 * static_cast<size_t>(k);
      if (k % 2 == 0) _mm_prefetch(reinterpret_cast<const char*>(t + at) + kPrefetchBytes, _MM_HINT_T0);
      __m256 x = _mm256_loadu_ps(t + at);
      // c[k]: the code, clamped to the top only where the error needs it; the packs below clamp the rest.
      if constexpr (Stochastic) {
        // stochastic_code: (rint(s * 2^16) + r) >> 16 with 2^16 folded into inv_step. A NaN s converts to
        // INT_MIN and gives a negative code, which every pack below writes as 0. One bit without error keeps the
        // sum (its code is 1 where the sum exceeds 65535).
        if constexpr (!PairedDraws) draws[k] = draws8_any(key, g.first_index + static_cast<uint32_t>(at));
        c[k] = _mm256_add_epi32(_mm256_cvtps_epi32(_mm256_mul_ps(_mm256_sub_ps(x, vmin), fixed_scale)), draws[k]);
        if constexpr (Feedback || Bits != 1) c[k] = _mm256_srai_epi32(c[k], 16);
      } else {
        // The conversion rounds in the current mode, as rint does (nearest even by default); s >= 0 and below
        // 2^31, or NaN, which converts to INT_MIN. An explicit round first cost 2 uops per vector.
        c[k] = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_sub_ps(x, vmin), vinv));
      }
      if constexpr (Feedback) {
        c[k] = _mm256_min_epi32(c[k], top_int);
        __m256 deq = _mm256_add_ps(vmin, _mm256_mul_ps(_mm256_cvtepi32_ps(c[k]), vstep));
        _mm256_storeu_ps(error + at, finite_or_zero(_mm256_sub_ps(x, deq)));
      }
    }
    uint8_t* out = codes + i * Bits / 8;
    if constexpr (Bits == 1) {
      const __m256i threshold = _mm256_set1_epi32(Stochastic && !Feedback ? 65535 : 0);
      for (int k = 0; k < 4; ++k)
        out[k] = static_cast<uint8_t>(_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpgt_epi32(c[k], threshold))));
    } else if constexpr (Bits == 8) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), bytes32(c));  // the saturation clamps
    } else if constexpr (Bits == 4) {
      const __m256i bytes = _mm256_min_epu8(bytes32(c), _mm256_set1_epi8(15));
      __m256i pairs = _mm256_maddubs_epi16(bytes, _mm256_set1_epi16(0x1001));  // c0 + 16 c1
      __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi16(pairs, pairs), 0x08);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out), _mm256_castsi256_si128(packed));
    } else {
      const __m256i bytes = _mm256_min_epu8(bytes32(c), _mm256_set1_epi8(3));
      __m256i pairs = _mm256_maddubs_epi16(bytes, _mm256_set1_epi16(0x0401));   // c0 + 4 c1
      __m256i quads = _mm256_madd_epi16(pairs, _mm256_set1_epi32(0x00100001));  // + 16 (c2 + 4 c3)
      __m256i words = _mm256_packs_epi32(quads, quads);
      __m256i packed = _mm256_packus_epi16(words, words);
      packed = _mm256_permutevar8x32_epi32(packed, _mm256_setr_epi32(0, 4, 0, 0, 0, 0, 0, 0));
      _mm_storel_epi64(reinterpret_cast<__m128i*>(out), _mm256_castsi256_si128(packed));
    }
  }
  return i;
}

template <int Bits, bool Stochastic, bool PairedDraws = false>
size_t encode_with(const float* t, size_t len, const EncodeGrid& g, uint8_t* codes, float* error) {
  return error ? encode<Bits, Stochastic, true, PairedDraws>(t, len, g, codes, error)
               : encode<Bits, Stochastic, false, PairedDraws>(t, len, g, codes, error);
}

template <int Bits>
size_t encode_bits(const float* t, size_t len, const EncodeGrid& g, uint8_t* codes, float* error) {
  if (!g.stochastic) return encode_with<Bits, false>(t, len, g, codes, error);
  return g.first_index % 32 == 0 ? encode_with<Bits, true, true>(t, len, g, codes, error)
                                 : encode_with<Bits, true, false>(t, len, g, codes, error);
}

template <int Bits, bool Accumulate>
size_t decode(const uint8_t* in, size_t len, float min, float step, float* out) {
  size_t i = 0;
  if constexpr (Bits == 8) {
    const __m256 vmin = _mm256_set1_ps(min), vstep = _mm256_set1_ps(step);
    for (; i + 8 <= len; i += 8) {
      __m256i c = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(in + i)));
      __m256 v = _mm256_add_ps(vmin, _mm256_mul_ps(_mm256_cvtepi32_ps(c), vstep));
      if constexpr (Accumulate) v = canonical(_mm256_add_ps(_mm256_loadu_ps(out + i), v));
      _mm256_storeu_ps(out + i, v);
    }
    return i;
  }
  // table[k] = min + (k mod 2^Bits) * step, the portable loop's arithmetic; 4 bits need 16 entries (two halves).
  alignas(32) float table[16];
  for (int k = 0; k < 16; ++k) table[k] = min + static_cast<float>(k & ((1 << Bits) - 1)) * step;
  const __m256 low = _mm256_load_ps(table), high = _mm256_load_ps(table + 8);
  for (; i + 8 <= len; i += 8) {
    __m256i idx;
    if constexpr (Bits == 4) {
      uint32_t w;
      std::memcpy(&w, in + i / 2, 4);
      idx = _mm256_srlv_epi32(_mm256_set1_epi32(static_cast<int>(w)), _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28));
    } else if constexpr (Bits == 2) {
      uint16_t w;
      std::memcpy(&w, in + i / 4, 2);
      idx = _mm256_srlv_epi32(_mm256_set1_epi32(w), _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14));
    } else {
      idx = _mm256_srlv_epi32(_mm256_set1_epi32(in[i / 8]), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    }
    __m256 v = _mm256_permutevar8x32_ps(low, idx);  // uses the low 3 bits
    if constexpr (Bits == 4)                        // bit 3 picks the upper half
      v = _mm256_blendv_ps(v, _mm256_permutevar8x32_ps(high, idx), _mm256_castsi256_ps(_mm256_slli_epi32(idx, 28)));
    if constexpr (Accumulate) v = canonical(_mm256_add_ps(_mm256_loadu_ps(out + i), v));
    _mm256_storeu_ps(out + i, v);
  }
  return i;
}

template <int Bits>
size_t decode_bits(const uint8_t* in, size_t len, float min, float step, float* out, bool accumulate) {
  return accumulate ? decode<Bits, true>(in, len, min, step, out) : decode<Bits, false>(in, len, min, step, out);
}

void min_max(const float* v, size_t len, float* lo, float* hi, bool* finite) {
  // Four pairs of accumulators, so that consecutive vectors' min and max do not wait on each other (one pair ran at
  // the min's latency, 4 cycles per 8 elements). Min and max are exact: the split changes no result.
  constexpr int kPairs = 4;
  __m256 mn[kPairs], mx[kPairs], nan[kPairs];
  for (int k = 0; k < kPairs; ++k) {
    mn[k] = _mm256_set1_ps(std::numeric_limits<float>::infinity());
    mx[k] = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
    nan[k] = _mm256_setzero_ps();
  }
  size_t i = 0;
  for (; i + 8 * kPairs <= len; i += 8 * kPairs) {
    _mm_prefetch(reinterpret_cast<const char*>(v + i) + kPrefetchBytes, _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(v + i + 16) + kPrefetchBytes, _MM_HINT_T0);
    for (int k = 0; k < kPairs; ++k) {
      __m256 x = _mm256_loadu_ps(v + i + 8 * static_cast<size_t>(k));
      nan[k] = _mm256_or_ps(nan[k], _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
      mn[k] = _mm256_min_ps(mn[k], x);
      mx[k] = _mm256_max_ps(mx[k], x);
    }
  }
  for (; i + 8 <= len; i += 8) {
    __m256 x = _mm256_loadu_ps(v + i);
    nan[0] = _mm256_or_ps(nan[0], _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
    mn[0] = _mm256_min_ps(mn[0], x);
    mx[0] = _mm256_max_ps(mx[0], x);
  }
  for (int k = 1; k < kPairs; ++k) {
    mn[0] = _mm256_min_ps(mn[0], mn[k]);
    mx[0] = _mm256_max_ps(mx[0], mx[k]);
    nan[0] = _mm256_or_ps(nan[0], nan[k]);
  }
  alignas(32) float a8[8], b8[8];
  _mm256_store_ps(a8, mn[0]);
  _mm256_store_ps(b8, mx[0]);
  float a = a8[0], b = b8[0];
  for (int k = 1; k < 8; ++k) {
    a = a8[k] < a ? a8[k] : a;
    b = b8[k] > b ? b8[k] : b;
  }
  finish_min_max(v, i, len, a, b, _mm256_movemask_ps(nan[0]) != 0, lo, hi, finite);
}

size_t encode_chunk(const float* t, size_t len, const EncodeGrid& g, uint8_t* codes, float* error) {
  return with_bits(g.bits, [&](auto b) { return encode_bits<decltype(b)::value>(t, len, g, codes, error); });
}

size_t decode_chunk(const uint8_t* codes, size_t len, int bits, float min, float step, float* out, bool accumulate) {
  return with_bits(bits,
                   [&](auto b) { return decode_bits<decltype(b)::value>(codes, len, min, step, out, accumulate); });
}

void sign_sum_squares4(const float* x, const float* e, size_t chunk, double sums[4]) {
  __m256d acc[8];  // chunk c: lanes 0-3 in acc[2c], 4-7 in acc[2c + 1]
  for (auto& a : acc) a = _mm256_setzero_pd();
  size_t i = 0;
  for (; i + 8 <= chunk; i += 8)
    for (int c = 0; c < 4; ++c) {
      const size_t at = static_cast<size_t>(c) * chunk + i;
      __m256 t = _mm256_loadu_ps(x + at);
      if (e) t = _mm256_add_ps(t, _mm256_loadu_ps(e + at));
      __m256d lo = _mm256_cvtps_pd(_mm256_castps256_ps128(t)), hi = _mm256_cvtps_pd(_mm256_extractf128_ps(t, 1));
      acc[2 * c] = _mm256_add_pd(acc[2 * c], _mm256_mul_pd(lo, lo));
      acc[2 * c + 1] = _mm256_add_pd(acc[2 * c + 1], _mm256_mul_pd(hi, hi));
    }
  for (int c = 0; c < 4; ++c) {
    alignas(32) double lane[8];
    _mm256_store_pd(lane, acc[2 * c]);
    _mm256_store_pd(lane + 4, acc[2 * c + 1]);
    sums[c] = finish_sign_sum(lane, x, e, chunk, c, i);
  }
}

size_t sign_pack(const float* x, float* e, size_t len, float scale, uint8_t* bits) {
  const __m256 zero = _mm256_setzero_ps(), pos = _mm256_set1_ps(scale), neg = _mm256_set1_ps(-scale);
  size_t i = 0;
  for (; i + 8 <= len; i += 8) {
    __m256 t = _mm256_loadu_ps(x + i);
    if (e) t = _mm256_add_ps(t, _mm256_loadu_ps(e + i));
    __m256 positive = _mm256_cmp_ps(t, zero, _CMP_NLT_UQ);  // !(t < 0): 0 and NaN count as +
    if (e) _mm256_storeu_ps(e + i, finite_or_zero(_mm256_sub_ps(t, _mm256_blendv_ps(neg, pos, positive))));
    bits[i / 8] = static_cast<uint8_t>(_mm256_movemask_ps(positive));
  }
  return i;
}

size_t sign_expand(const uint8_t* bits, size_t len, float scale, float* x, bool accumulate) {
  const __m256 pos = _mm256_set1_ps(scale), neg = _mm256_set1_ps(-scale);
  const __m256i lane_bit = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
  size_t i = 0;
  for (; i + 8 <= len; i += 8) {
    __m256i set = _mm256_and_si256(_mm256_set1_epi32(bits[i / 8]), lane_bit);
    __m256 v = _mm256_blendv_ps(neg, pos, _mm256_castsi256_ps(_mm256_cmpeq_epi32(set, lane_bit)));
    if (accumulate) v = _mm256_add_ps(_mm256_loadu_ps(x + i), v);
    _mm256_storeu_ps(x + i, canonical(v));
  }
  return i;
}

}  // namespace

const VectorLoops kAvx2Loops{min_max, encode_chunk, decode_chunk, sign_sum_squares4, sign_pack, sign_expand};

}  // namespace bagua

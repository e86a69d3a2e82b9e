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

// feedback_residual (quantize_math.h): Inf and NaN lanes become 0.
inline __m512 finite_or_zero(__m512 v) {
  return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(_mm512_abs_ps(v), _mm512_set1_ps(INFINITY), _CMP_LT_OQ), v);
}

// pair_hash (quantize_math.h) of sixteen keyed pairs (pair + key).
inline __m512i pair_hash16(__m512i pairs) {
  __m512i h = _mm512_mullo_epi32(pairs, _mm512_set1_epi32(0x21f0aaad));
  h = _mm512_xor_si512(h, _mm512_srli_epi32(h, 15));
  h = _mm512_mullo_epi32(h, _mm512_set1_epi32(0x735a2d97));
  return _mm512_xor_si512(h, _mm512_srli_epi32(h, 15));
}

// keyed_draw16 for sixteen consecutive indices from any first index (the path for a chunk that does not start at a
// multiple of 32): each lane hashes its own pair and takes its half.
inline __m512i draws16_any(__m512i key, uint32_t first) {
  const __m512i index = _mm512_add_epi32(_mm512_set1_epi32(static_cast<int>(first)),
                                         _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
  __m512i pair = _mm512_or_si512(_mm512_slli_epi32(_mm512_srli_epi32(index, 5), 4),
                                 _mm512_and_si512(index, _mm512_set1_epi32(15)));
  __m512i h = pair_hash16(_mm512_add_epi32(pair, key));
  return _mm512_and_si512(_mm512_srlv_epi32(h, _mm512_and_si512(index, _mm512_set1_epi32(16))),
                          _mm512_set1_epi32(0xffff));
}

// Conversions of sixteen elements, in the current rounding mode as the portable loop's rint (nearest even by
// default, which the CUDA kernels always use). Nearest: rint(s); s >= 0 and at most the top code, since
// s <= (max - min) * ((2^b - 1) / (max - min)) rounds to no more than 2^b - 1. Stochastic with draws r: the fixed-point
// sum rint(s * 2^16) + r, whose bits 16 and up are the code (stochastic_code) before clamping; `scale` then folds
// 2^16 into inv_step (exact: the caller checks that it is finite). A NaN s (step 0 after an overflowing range)
// converts to INT_MIN, which every path below turns into code 0.
template <bool Stochastic>
inline __m512i convert16(__m512 x, __m512 vmin, __m512 scale, __m512i r) {
  __m512i v = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_sub_ps(x, vmin), scale));  // the current mode, as rint
  if constexpr (Stochastic) v = _mm512_add_epi32(v, r);
  return v;
}

// Sixty-four codes as bytes in element order, from four vectors of conversions: the code is the low 16-bit word of
// each lane, or the high one for stochastic sums. Both words of an INT_MIN lane are non-positive, so the unsigned
// saturation writes 0; a stochastic code one above the top is clamped here (8 bits: by the saturation).
template <int Bits, bool HighWords>
inline __m512i code_bytes64(const __m512i v[4]) {
  const __m512i words = HighWords
                            ? _mm512_setr_epi32(0x00030001, 0x00070005, 0x000b0009, 0x000f000d, 0x00130011, 0x00170015,
                                                0x001b0019, 0x001f001d, 0x00230021, 0x00270025, 0x002b0029, 0x002f002d,
                                                0x00330031, 0x00370035, 0x003b0039, 0x003f003d)
                            : _mm512_setr_epi32(0x00020000, 0x00060004, 0x000a0008, 0x000e000c, 0x00120010, 0x00160014,
                                                0x001a0018, 0x001e001c, 0x00220020, 0x00260024, 0x002a0028, 0x002e002c,
                                                0x00320030, 0x00360034, 0x003a0038, 0x003e003c);
  // a holds the codes of elements 0-31 as words, b those of 32-63; the pack interleaves them by 8-byte units.
  __m512i a = _mm512_permutex2var_epi16(v[0], words, v[1]), b = _mm512_permutex2var_epi16(v[2], words, v[3]);
  __m512i bytes = _mm512_permutexvar_epi64(_mm512_setr_epi64(0, 2, 4, 6, 1, 3, 5, 7), _mm512_packus_epi16(a, b));
  if constexpr (Bits != 8) bytes = _mm512_min_epu8(bytes, _mm512_set1_epi8((1 << Bits) - 1));
  return bytes;
}

template <int Bits, bool Stochastic, bool Feedback, bool PairedDraws>
size_t encode(const float* t, size_t len, const EncodeGrid& g, uint8_t* codes, float* error) {
  const __m512 vmin = _mm512_set1_ps(g.min), vstep = _mm512_set1_ps(g.step);
  const __m512 scale = _mm512_set1_ps(Stochastic ? g.inv_step * 65536.0f : g.inv_step);
  const __m512i top_int = _mm512_set1_epi32((1 << Bits) - 1);
  const __m512i key = _mm512_set1_epi32(static_cast<int>(g.draw_key));
  // Paired draws: elements [at, at + 32) are the sixteen pairs from (first_index + at) / 2, kept plus the key.
  __m512i pairs = _mm512_add_epi32(_mm512_set1_epi32(static_cast<int>((g.first_index >> 1) + g.draw_key)),
                                   _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
  size_t i = 0;
  for (; i + 64 <= len; i += 64) {
    __m512i v[4];
    __m512i draws[4] = {};
    if constexpr (Stochastic && PairedDraws) {
      for (int k = 0; k < 2; ++k) {
        __m512i h = pair_hash16(pairs);
        pairs = _mm512_add_epi32(pairs, _mm512_set1_epi32(16));
        draws[2 * k] = _mm512_and_si512(h, _mm512_set1_epi32(0xffff));
        draws[2 * k + 1] = _mm512_srli_epi32(h, 16);
      }
    }
    for (int k = 0; k < 4; ++k) {
      const size_t at = i + 16 * static_cast<size_t>(k);
      _mm_prefetch(reinterpret_cast<const char*>(t + at) + kPrefetchBytes, _MM_HINT_T0);
      __m512 x = _mm512_loadu_ps(t + at);
      if constexpr (Stochastic && !PairedDraws) draws[k] = draws16_any(key, g.first_index + static_cast<uint32_t>(at));
      v[k] = convert16<Stochastic>(x, vmin, scale, draws[k]);
      if constexpr (Feedback) {
        // The clamped code itself, for the error (a NaN lane's negative code times step 0 adds nothing).
        if constexpr (Stochastic) v[k] = _mm512_srai_epi32(v[k], 16);
        v[k] = _mm512_min_epi32(v[k], top_int);
        __m512 deq = _mm512_add_ps(vmin, _mm512_mul_ps(_mm512_cvtepi32_ps(v[k]), vstep));
        _mm512_storeu_ps(error + at, finite_or_zero(_mm512_sub_ps(x, deq)));
      }
    }
    uint8_t* out = codes + i * Bits / 8;
    if constexpr (Bits == 1) {
      // Code 1 where the code (or the stochastic sum's bits 16 and up) is positive; INT_MIN lanes give 0.
      const __m512i threshold = _mm512_set1_epi32(Stochastic && !Feedback ? 65535 : 0);
      const __mmask32 low =
          _mm512_kunpackw(_mm512_cmpgt_epi32_mask(v[1], threshold), _mm512_cmpgt_epi32_mask(v[0], threshold));
      const __mmask32 high =
          _mm512_kunpackw(_mm512_cmpgt_epi32_mask(v[3], threshold), _mm512_cmpgt_epi32_mask(v[2], threshold));
      const uint64_t m = _cvtmask64_u64(_mm512_kunpackd(high, low));
      std::memcpy(out, &m, 8);
    } else {
      // Without error a stochastic lane holds the sum, whose high word is the code; with error, the clamped code.
      constexpr bool kHighWords = Stochastic && !Feedback;
      __m512i bytes = code_bytes64<Bits, kHighWords>(v);
      if constexpr (Bits == 8) {
        _mm512_storeu_si512(out, bytes);
      } else if constexpr (Bits == 4) {
        __m512i pairs4 = _mm512_maddubs_epi16(bytes, _mm512_set1_epi16(0x1001));  // c0 + 16 c1
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), _mm512_cvtepi16_epi8(pairs4));
      } else {
        __m512i pairs2 = _mm512_maddubs_epi16(bytes, _mm512_set1_epi16(0x0401));   // c0 + 4 c1
        __m512i quads = _mm512_madd_epi16(pairs2, _mm512_set1_epi32(0x00100001));  // + 16 (c2 + 4 c3)
        _mm_storeu_si128(reinterpret_cast<__m128i*>(out), _mm512_cvtepi32_epi8(quads));
      }
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
  // Two pairs of accumulators, so that consecutive vectors' min and max do not wait on each other (min and max are
  // exact: the split changes no result).
  const __m512 inf = _mm512_set1_ps(std::numeric_limits<float>::infinity());
  __m512 mn[2] = {inf, inf};
  __m512 mx[2] = {_mm512_sub_ps(_mm512_setzero_ps(), inf), _mm512_sub_ps(_mm512_setzero_ps(), inf)};
  __mmask16 nan = 0;
  size_t i = 0;
  for (; i + 32 <= len; i += 32) {
    _mm_prefetch(reinterpret_cast<const char*>(v + i) + kPrefetchBytes, _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(v + i + 16) + kPrefetchBytes, _MM_HINT_T0);
    for (int k = 0; k < 2; ++k) {
      __m512 x = _mm512_loadu_ps(v + i + 16 * static_cast<size_t>(k));
      nan |= _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
      mn[k] = _mm512_min_ps(mn[k], x);
      mx[k] = _mm512_max_ps(mx[k], x);
    }
  }
  for (; i + 16 <= len; i += 16) {
    __m512 x = _mm512_loadu_ps(v + i);
    nan |= _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
    mn[0] = _mm512_min_ps(mn[0], x);
    mx[0] = _mm512_max_ps(mx[0], x);
  }
  float a = _mm512_reduce_min_ps(_mm512_min_ps(mn[0], mn[1])), b = _mm512_reduce_max_ps(_mm512_max_ps(mx[0], mx[1]));
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
    if (e) _mm512_storeu_ps(e + i, finite_or_zero(_mm512_sub_ps(t, _mm512_mask_blend_ps(positive, neg, pos))));
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

// CPU reference for docs/formats.md "minmax v1". Per chunk: one pass for min/max (the chunk stays in L1),
// one pass to quantize and pack. Hot loops are compiled for AVX-512, AVX2 and the baseline (target_clones);
// all give the same bits (no contraction, no fast-math).
#include "kernels/quantize.h"

// GCC 12's AVX-512 headers trip -Wuninitialized on their own _mm512_undefined_* helpers.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

#include <cmath>
#include <cstring>
#include <limits>

#include "base/error.h"
#include "kernels/cpu/reduce.h"
#include "kernels/half.h"
#include "kernels/quantize_math.h"

namespace bagua {

namespace {

constexpr size_t kHeaderBytes = 8;  // f32 min, f32 max

size_t code_bytes(size_t len, int bits) {
  size_t raw = (len * static_cast<size_t>(bits) + 7) / 8;
  return (raw + 3) & ~size_t(3);  // each chunk block stays 4-byte aligned
}

float load(const void* x, bagua_datatype_t dtype, size_t i) {
  switch (dtype) {
    case BAGUA_FLOAT16: return fp16_to_float(static_cast<const uint16_t*>(x)[i]);
    case BAGUA_BFLOAT16: return bf16_to_float(static_cast<const uint16_t*>(x)[i]);
    default: return static_cast<const float*>(x)[i];
  }
}

void store(void* x, bagua_datatype_t dtype, size_t i, float v) {
  switch (dtype) {
    case BAGUA_FLOAT16: static_cast<uint16_t*>(x)[i] = float_to_fp16(v); break;
    case BAGUA_BFLOAT16: static_cast<uint16_t*>(x)[i] = float_to_bf16(v); break;
    default: static_cast<float*>(x)[i] = v; break;
  }
}

void check_dtype(bagua_datatype_t dtype) {
  if (dtype != BAGUA_FLOAT32 && dtype != BAGUA_FLOAT16 && dtype != BAGUA_BFLOAT16)
    fail(BAGUA_ERR_INVALID_ARGUMENT, "quantization takes float32, float16 or bfloat16 input");
}

// Grid of a chunk: code q stands for min + q * step. Non-finite input poisons the chunk (min = max = NaN).
struct Grid {
  float min, max, step, inv_step;
  bool poisoned;
};

Grid make_grid(float lo, float hi, int bits, bool poisoned) {
  Grid g{lo, hi, 0.0f, 0.0f, poisoned};
  if (poisoned) {
    g.min = g.max = std::numeric_limits<float>::quiet_NaN();
    return g;
  }
  float levels = static_cast<float>((1u << bits) - 1);
  g.step = (hi - lo) / levels;
  g.inv_step = g.step > 0 ? levels / (hi - lo) : 0.0f;
  if (!std::isfinite(g.step) || !std::isfinite(g.inv_step)) {  // range overflows float
    g.step = 0;
    g.inv_step = 0;
  }
  return g;
}

// Min, max and "any non-finite" of a chunk. Sixteen independent lanes so the compiler can vectorize without
// reassociating anything (min and max are exact, so the lane split changes no result).
__attribute__((target_clones("avx512f", "avx2", "default"))) void min_max(const float* v, size_t len, float* lo,
                                                                          float* hi, bool* finite) {
  constexpr size_t kLanes = 16;
  float mn[kLanes], mx[kLanes];
  uint32_t bad[kLanes];
  for (size_t k = 0; k < kLanes; ++k) {
    mn[k] = std::numeric_limits<float>::infinity();
    mx[k] = -std::numeric_limits<float>::infinity();
    bad[k] = 0;
  }
  size_t full = len / kLanes * kLanes;
  for (size_t i = 0; i < full; i += kLanes)
    for (size_t k = 0; k < kLanes; ++k) {
      float x = v[i + k];
      uint32_t bits;
      std::memcpy(&bits, &x, 4);
      bad[k] |= (bits & 0x7f800000u) == 0x7f800000u;  // Inf or NaN
      mn[k] = x < mn[k] ? x : mn[k];
      mx[k] = x > mx[k] ? x : mx[k];
    }
  float a = mn[0], b = mx[0];
  uint32_t any_bad = 0;
  for (size_t k = 0; k < kLanes; ++k) {
    a = mn[k] < a ? mn[k] : a;
    b = mx[k] > b ? mx[k] : b;
    any_bad |= bad[k];
  }
  for (size_t i = full; i < len; ++i) {
    uint32_t bits;
    std::memcpy(&bits, &v[i], 4);
    any_bad |= (bits & 0x7f800000u) == 0x7f800000u;
    a = v[i] < a ? v[i] : a;
    b = v[i] > b ? v[i] : b;
  }
  *lo = a;
  *hi = b;
  *finite = any_bad == 0;
}

// AVX-512 fast paths for the common case (fp32 chunk min/max, 8-bit nearest codes). Same operations in the
// same order as the portable loops, so the same bits.
// The reductions' choice (BAGUA_CPU_KERNELS=scalar or avx2 turns these paths off too).
bool avx512_available() { return cpu_kernels() == CpuKernels::kAvx512; }

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
__attribute__((target("avx512f,avx512bw,avx512vl"))) void min_max_avx512(const float* v, size_t len, float* lo,
                                                                         float* hi, bool* finite) {
  __m512 mn = _mm512_set1_ps(std::numeric_limits<float>::infinity());
  __m512 mx = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  const __m512i exponent = _mm512_set1_epi32(0x7f800000);
  __mmask16 bad = 0;
  size_t i = 0;
  for (; i + 16 <= len; i += 16) {
    _mm_prefetch(reinterpret_cast<const char*>(v + i) + 4096, _MM_HINT_T0);  // the next chunk, early
    __m512 x = _mm512_loadu_ps(v + i);
    bad |= _mm512_cmpeq_epi32_mask(_mm512_and_si512(_mm512_castps_si512(x), exponent), exponent);
    mn = _mm512_min_ps(mn, x);
    mx = _mm512_max_ps(mx, x);
  }
  float a = _mm512_reduce_min_ps(mn), b = _mm512_reduce_max_ps(mx);
  bool any_bad = bad != 0;
  for (; i < len; ++i) {
    any_bad |= !std::isfinite(v[i]);
    a = v[i] < a ? v[i] : a;
    b = v[i] > b ? v[i] : b;
  }
  *lo = a;
  *hi = b;
  *finite = !any_bad;
}

__attribute__((target("avx512f,avx512bw,avx512vl"))) void quantize8_avx512(const float* v, size_t len, float min,
                                                                           float inv_step, uint8_t* out) {
  const __m512 vmin = _mm512_set1_ps(min), vinv = _mm512_set1_ps(inv_step);
  const __m512 zero = _mm512_setzero_ps(), top = _mm512_set1_ps(255.0f);
  size_t i = 0;
  for (; i + 16 <= len; i += 16) {
    __m512 t = _mm512_mul_ps(_mm512_sub_ps(_mm512_loadu_ps(v + i), vmin), vinv);
    __m512 r = _mm512_roundscale_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);  // ties to even
    r = _mm512_min_ps(_mm512_max_ps(r, zero), top);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), _mm512_cvtepi32_epi8(_mm512_cvttps_epi32(r)));
  }
  for (; i < len; ++i) {
    float r = std::rint((v[i] - min) * inv_step);
    out[i] = static_cast<uint8_t>(r < 0.0f ? 0.0f : (r > 255.0f ? 255.0f : r));
  }
}

#pragma GCC diagnostic pop

// The draws of elements [index, index + len): one key per run that shares index / 2^32, then a vector loop.
__attribute__((target_clones("avx512f", "avx2", "default"))) void keyed_draws(uint32_t key, uint32_t first, size_t len,
                                                                              float* out) {
  for (size_t i = 0; i < len; ++i) out[i] = keyed_draw(key, first + static_cast<uint32_t>(i));
}

void stochastic_draws(const RoundingKey& key, uint64_t index, size_t len, float* out) {
  while (len > 0) {
    uint64_t run = std::min<uint64_t>(len, (uint64_t{1} << 32) - (index & 0xffffffffu));  // to the next 2^32
    keyed_draws(draw_key(key.seed, key.step, key.rank, index >> 32), static_cast<uint32_t>(index), run, out);
    index += run;
    out += run;
    len -= run;
  }
}

// Codes for one chunk, rounded to nearest (ties to even) or stochastically, clamped to [0, 2^b - 1].
__attribute__((target_clones("avx512f", "avx2", "default"))) void quantize_values(const float* v, size_t len, Grid g,
                                                                                  int bits, const float* draws,
                                                                                  uint32_t* codes) {
  // Two loops, so that each vectorizes. t >= 0 (v >= the chunk's min, inv_step >= 0) and t + u < 2^31, so floor is
  // the truncating conversion to int32, which vectorizes where floor() may not; the codes fit in int32.
  const float top = static_cast<float>((1u << bits) - 1);
  if (draws) {
    for (size_t i = 0; i < len; ++i) {
      float t = (v[i] - g.min) * g.inv_step;
      float r = static_cast<float>(static_cast<int32_t>(t + draws[i]));  // floor(t + u)
      r = r > top ? top : r;
      codes[i] = static_cast<uint32_t>(static_cast<int32_t>(r));
    }
    return;
  }
  for (size_t i = 0; i < len; ++i) {
    float t = (v[i] - g.min) * g.inv_step;
    float r = std::rint(t);  // default rounding mode: ties to even
    r = r < 0.0f ? 0.0f : (r > top ? top : r);
    codes[i] = static_cast<uint32_t>(static_cast<int32_t>(r));
  }
}

template <int Bits>
void pack_bits(const uint32_t* codes, size_t len, uint8_t* out) {
  constexpr size_t kPerByte = 8 / Bits;
  size_t full = len / kPerByte;
  for (size_t j = 0; j < full; ++j) {
    uint32_t byte = 0;
    for (size_t k = 0; k < kPerByte; ++k) byte |= codes[j * kPerByte + k] << (k * Bits);
    out[j] = static_cast<uint8_t>(byte);
  }
  for (size_t i = full * kPerByte; i < len; ++i)
    out[i / kPerByte] |= static_cast<uint8_t>(codes[i] << ((i % kPerByte) * Bits));
}

__attribute__((target_clones("avx512f", "avx2", "default"))) void pack(const uint32_t* codes, size_t len, int bits,
                                                                       uint8_t* out, size_t bytes) {
  std::memset(out, 0, bytes);
  switch (bits) {
    case 8:
      for (size_t i = 0; i < len; ++i) out[i] = static_cast<uint8_t>(codes[i]);
      break;
    case 4: pack_bits<4>(codes, len, out); break;
    case 2: pack_bits<2>(codes, len, out); break;
    default: pack_bits<1>(codes, len, out); break;
  }
}

float header_float(const uint8_t* p) {
  uint32_t u = static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 | static_cast<uint32_t>(p[2]) << 16 |
               static_cast<uint32_t>(p[3]) << 24;
  return bits_float(u);
}

void put_header_float(uint8_t* p, float f) {
  uint32_t u = float_bits(f);
  for (int k = 0; k < 4; ++k) p[k] = static_cast<uint8_t>(u >> (8 * k));
}

// Compresses [begin, begin+len) already converted to float in `v`; returns the dequantized values in `deq`
// when asked (error feedback).
void compress_chunk(const float* v, size_t len, const MinMaxFormat& f, const RoundingKey& key, uint64_t index,
                    uint8_t* out, float* deq) {
  float lo = 0, hi = 0;
  bool finite = true;
  if (avx512_available())
    min_max_avx512(v, len, &lo, &hi, &finite);
  else
    min_max(v, len, &lo, &hi, &finite);
  Grid g = make_grid(lo, hi, f.bits, !finite);
  put_header_float(out, g.min);
  put_header_float(out + 4, g.max);
  if (f.bits == 8 && !key.stochastic && !deq && !g.poisoned && avx512_available()) {
    size_t bytes = code_bytes(len, 8);
    quantize8_avx512(v, len, g.min, g.inv_step, out + kHeaderBytes);
    std::memset(out + kHeaderBytes + len, 0, bytes - len);
    return;
  }
  uint32_t codes[4096];
  float draws[4096];
  if (g.poisoned) {
    std::fill(codes, codes + len, 0u);
  } else {
    if (key.stochastic) stochastic_draws(key, index, len, draws);
    quantize_values(v, len, g, f.bits, key.stochastic ? draws : nullptr, codes);
  }
  pack(codes, len, f.bits, out + kHeaderBytes, code_bytes(len, f.bits));
  if (deq) {
    if (g.poisoned)
      std::fill(deq, deq + len, g.min);
    else
      for (size_t i = 0; i < len; ++i) deq[i] = g.min + static_cast<float>(codes[i]) * g.step;
  }
}

// Dequantized values of one chunk into `out` (len floats).
__attribute__((target_clones("avx512f", "avx2", "default"))) void dequantize_chunk(const uint8_t* codes, size_t len,
                                                                                   int bits, float min, float step,
                                                                                   float* out) {
  switch (bits) {
    case 8:
      for (size_t i = 0; i < len; ++i) out[i] = min + static_cast<float>(codes[i]) * step;
      break;
    case 4:
      for (size_t i = 0; i < len; ++i) out[i] = min + static_cast<float>((codes[i / 2] >> ((i % 2) * 4)) & 15u) * step;
      break;
    case 2:
      for (size_t i = 0; i < len; ++i) out[i] = min + static_cast<float>((codes[i / 4] >> ((i % 4) * 2)) & 3u) * step;
      break;
    default:
      for (size_t i = 0; i < len; ++i) out[i] = min + static_cast<float>((codes[i / 8] >> (i % 8)) & 1u) * step;
      break;
  }
}

template <typename Sink>
void decompress_chunks(const uint8_t* in, size_t count, const MinMaxFormat& f, Sink&& sink) {
  validate(f);
  float values[4096];
  for (size_t begin = 0; begin < count; begin += f.chunk) {
    size_t len = std::min(f.chunk, count - begin);
    float lo = header_float(in), hi = header_float(in + 4);
    Grid g = make_grid(lo, hi, f.bits, std::isnan(lo) || std::isnan(hi));
    if (g.poisoned)
      std::fill(values, values + len, g.min);
    else
      dequantize_chunk(in + kHeaderBytes, len, f.bits, g.min, g.step, values);
    sink(begin, values, len);
    in += kHeaderBytes + code_bytes(len, f.bits);
  }
}

}  // namespace

void validate(const MinMaxFormat& f) {
  if (f.bits != 1 && f.bits != 2 && f.bits != 4 && f.bits != 8)
    fail(BAGUA_ERR_INVALID_ARGUMENT, "quantization bits {} is not 1, 2, 4 or 8", f.bits);
  if (f.chunk < 256 || f.chunk > 4096)
    fail(BAGUA_ERR_INVALID_ARGUMENT, "quantization chunk {} is outside [256, 4096] elements", f.chunk);
}

size_t minmax_compressed_bytes(size_t count, const MinMaxFormat& f) {
  validate(f);
  size_t full = count / f.chunk, rest = count % f.chunk;
  return full * (kHeaderBytes + code_bytes(f.chunk, f.bits)) + (rest ? kHeaderBytes + code_bytes(rest, f.bits) : 0);
}

float stochastic_draw(const RoundingKey& key, uint64_t index) {
  return rounding_draw(key.seed, key.step, key.rank, index);
}

void minmax_compress(const void* x, bagua_datatype_t dtype, size_t count, const MinMaxFormat& f, const RoundingKey& key,
                     uint8_t* out) {
  validate(f);
  check_dtype(dtype);
  float buf[4096];
  for (size_t begin = 0; begin < count; begin += f.chunk) {
    size_t len = std::min(f.chunk, count - begin);
    const float* v;
    if (dtype == BAGUA_FLOAT32) {
      v = static_cast<const float*>(x) + begin;
    } else {
      for (size_t i = 0; i < len; ++i) buf[i] = load(x, dtype, begin + i);
      v = buf;
    }
    compress_chunk(v, len, f, key, key.index_base + begin, out, nullptr);
    out += kHeaderBytes + code_bytes(len, f.bits);
  }
}

void minmax_compress_ef(const void* x, bagua_datatype_t dtype, size_t count, float* error, const MinMaxFormat& f,
                        const RoundingKey& key, uint8_t* out) {
  validate(f);
  check_dtype(dtype);
  float t[4096], deq[4096];
  for (size_t begin = 0; begin < count; begin += f.chunk) {
    size_t len = std::min(f.chunk, count - begin);
    for (size_t i = 0; i < len; ++i) t[i] = load(x, dtype, begin + i) + error[begin + i];
    compress_chunk(t, len, f, key, key.index_base + begin, out, deq);
    for (size_t i = 0; i < len; ++i) error[begin + i] = canonical_float(t[i] - deq[i]);
    out += kHeaderBytes + code_bytes(len, f.bits);
  }
}

void minmax_decompress(const uint8_t* in, size_t count, const MinMaxFormat& f, void* x, bagua_datatype_t dtype) {
  check_dtype(dtype);
  decompress_chunks(in, count, f, [&](size_t begin, const float* v, size_t len) {
    if (dtype == BAGUA_FLOAT32)
      std::memcpy(static_cast<float*>(x) + begin, v, len * sizeof(float));
    else
      for (size_t i = 0; i < len; ++i) store(x, dtype, begin + i, v[i]);
  });
}

void minmax_decompress_accumulate(const uint8_t* in, size_t count, const MinMaxFormat& f, float* acc) {
  decompress_chunks(in, count, f, [&](size_t begin, const float* v, size_t len) {
    float* a = acc + begin;
    for (size_t i = 0; i < len; ++i) a[i] = canonical_float(a[i] + v[i]);
  });
}

}  // namespace bagua

// CPU reference for docs/formats.md "minmax v1". Per chunk: one pass for min/max (the chunk stays in L1),
// one pass to quantize and pack. The portable loops are compiled for AVX-512, AVX2 and the baseline
// (target_clones); with AVX-512 or AVX2 hand-written loops (quantize_simd.h) do the bulk of each chunk. All give
// the same bits (no contraction, no fast-math).
#include "kernels/quantize.h"

#include <cmath>
#include <cstring>
#include <limits>

#include "base/error.h"
#include "kernels/cpu/quantize_simd.h"
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
BAGUA_ISA_CLONES void min_max(const float* v, size_t len, float* lo, float* hi, bool* finite) {
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

// The draws of elements [index, index + len): one key per run that shares index / 2^32, then a vector loop.
BAGUA_ISA_CLONES void keyed_draws(uint32_t key, uint32_t first, size_t len, uint32_t* out) {
  for (size_t i = 0; i < len; ++i) out[i] = keyed_draw16(key, first + static_cast<uint32_t>(i));
}

void stochastic_draws(const RoundingKey& key, uint64_t index, size_t len, uint32_t* out) {
  while (len > 0) {
    size_t run = static_cast<size_t>(std::min<uint64_t>(len, (uint64_t{1} << 32) - (index & 0xffffffffu)));
    keyed_draws(draw_key(key.seed, key.step, key.rank, index >> 32), static_cast<uint32_t>(index), run, out);
    index += run;
    out += run;
    len -= run;
  }
}

// Codes for one chunk, rounded to nearest (ties to even) or stochastically (stochastic_code with the draws),
// clamped to [0, 2^b - 1].
BAGUA_ISA_CLONES void quantize_values(const float* v, size_t len, Grid g, int bits, const uint32_t* draws,
                                      uint32_t* codes) {
  const int32_t top_code = static_cast<int32_t>((1u << bits) - 1);
  if (draws) {
    for (size_t i = 0; i < len; ++i)
      codes[i] = static_cast<uint32_t>(stochastic_code((v[i] - g.min) * g.inv_step, draws[i], top_code));
    return;
  }
  // t >= 0 (v >= the chunk's min, inv_step >= 0) and below 2^31, so the codes fit in int32; except NaN, when the
  // chunk's range overflows float (inv_step 0, v - min infinite): code 0, as on CUDA (cuda/quantize.cu).
  const float top = static_cast<float>(top_code);
  for (size_t i = 0; i < len; ++i) {
    float t = (v[i] - g.min) * g.inv_step;
    float r = std::rint(t);  // default rounding mode: ties to even
    r = r >= 0.0f ? (r > top ? top : r) : 0.0f;
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

// out must be zeroed first.
BAGUA_ISA_CLONES void pack(const uint32_t* codes, size_t len, int bits, uint8_t* out) {
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

// draw_key (four splitmix64 steps) of an index's high 32 bits, computed once per call rather than per chunk.
class DrawKeys {
 public:
  explicit DrawKeys(const RoundingKey& key) : key_(key) {}
  uint32_t of(uint64_t index) {
    const uint64_t high = index >> 32;
    if (!known_ || high != high_) {
      value_ = draw_key(key_.seed, key_.step, key_.rank, high);
      high_ = high;
      known_ = true;
    }
    return value_;
  }

 private:
  const RoundingKey& key_;
  bool known_ = false;
  uint64_t high_ = 0;
  uint32_t value_ = 0;
};

// Compresses one chunk of `len` floats in `v`. With error (not NULL): error[i] = feedback_residual(v[i] - deq[i]).
void compress_chunk(const float* v, size_t len, const MinMaxFormat& f, const RoundingKey& key, DrawKeys& draw_keys,
                    uint64_t index, uint8_t* out, float* error) {
  float lo = 0, hi = 0;
  bool finite = true;
  const VectorLoops* loops = vector_loops();
  if (loops)
    loops->min_max(v, len, &lo, &hi, &finite);
  else
    min_max(v, len, &lo, &hi, &finite);
  Grid g = make_grid(unsigned_zero(lo), unsigned_zero(hi), f.bits, !finite);
  put_header_float(out, g.min);
  put_header_float(out + 4, g.max);
  uint8_t* codes_out = out + kHeaderBytes;
  size_t done = 0;
  // The vector loop draws with one key, so the chunk must not cross a 2^32 index boundary, and folds 2^16 into
  // inv_step, which must stay finite (the portable loop takes both cases).
  const bool one_key = len == 0 || (index >> 32) == ((index + len - 1) >> 32);
  const bool foldable = std::isfinite(g.inv_step * 65536.0f);
  if (!g.poisoned && loops && (!key.stochastic || (one_key && foldable))) {
    EncodeGrid grid{f.bits,
                    g.min,
                    g.step,
                    g.inv_step,
                    key.stochastic,
                    key.stochastic ? draw_keys.of(index) : 0u,
                    static_cast<uint32_t>(index)};
    done = loops->encode_chunk(v, len, grid, codes_out, error);
  }
  const size_t rest = len - done, done_bytes = done * static_cast<size_t>(f.bits) / 8;
  std::memset(codes_out + done_bytes, 0, code_bytes(len, f.bits) - done_bytes);
  if (rest == 0) return;
  uint32_t codes[4096];
  uint32_t draws[4096];
  if (g.poisoned) {
    std::fill(codes, codes + rest, 0u);
  } else {
    if (key.stochastic) stochastic_draws(key, index + done, rest, draws);
    quantize_values(v + done, rest, g, f.bits, key.stochastic ? draws : nullptr, codes);
  }
  pack(codes, rest, f.bits, codes_out + done_bytes);
  if (error)
    for (size_t i = 0; i < rest; ++i) {
      float deq = g.poisoned ? g.min : g.min + static_cast<float>(codes[i]) * g.step;
      error[done + i] = feedback_residual(v[done + i] - deq);
    }
}

// Dequantized values of one chunk into `out` (len floats).
BAGUA_ISA_CLONES void dequantize_chunk(const uint8_t* codes, size_t len, int bits, float min, float step, float* out) {
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

// out[i] = deq[i], or out[i] = canonical(out[i] + deq[i]) when accumulating, for one chunk.
void decode_chunk(const uint8_t* codes, size_t len, int bits, const Grid& g, float* out, bool accumulate) {
  size_t done = 0;
  const VectorLoops* loops = vector_loops();
  if (!g.poisoned && loops) done = loops->decode_chunk(codes, len, bits, g.min, g.step, out, accumulate);
  if (done == len) return;
  float values[4096];
  const size_t rest = len - done;
  if (g.poisoned)
    std::fill(values, values + rest, g.min);
  else
    dequantize_chunk(codes + done * static_cast<size_t>(bits) / 8, rest, bits, g.min, g.step, values);
  float* o = out + done;
  if (accumulate)
    for (size_t i = 0; i < rest; ++i) o[i] = canonical_float(o[i] + values[i]);
  else
    std::memcpy(o, values, rest * sizeof(float));
}

// Calls chunk_fn(begin, len, codes, grid) for each chunk of a minmax v1 buffer.
template <typename ChunkFn>
void for_each_chunk(const uint8_t* in, size_t count, const MinMaxFormat& f, ChunkFn&& chunk_fn) {
  validate(f);
  for (size_t begin = 0; begin < count; begin += f.chunk) {
    size_t len = std::min(f.chunk, count - begin);
    float lo = header_float(in), hi = header_float(in + 4);
    chunk_fn(begin, len, in + kHeaderBytes, make_grid(lo, hi, f.bits, std::isnan(lo) || std::isnan(hi)));
    in += kHeaderBytes + code_bytes(len, f.bits);
  }
}

}  // namespace

const VectorLoops* vector_loops() {
  switch (cpu_kernels()) {
    case CpuKernels::kAvx512: return &kAvx512Loops;
    case CpuKernels::kAvx2: return &kAvx2Loops;
    default: return nullptr;
  }
}

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

uint32_t stochastic_draw(const RoundingKey& key, uint64_t index) {
  return rounding_draw16(key.seed, key.step, key.rank, index);
}

void minmax_compress(const void* x, bagua_datatype_t dtype, size_t count, const MinMaxFormat& f, const RoundingKey& key,
                     uint8_t* out) {
  validate(f);
  check_dtype(dtype);
  float buf[4096];
  DrawKeys draw_keys(key);
  for (size_t begin = 0; begin < count; begin += f.chunk) {
    size_t len = std::min(f.chunk, count - begin);
    const float* v;
    if (dtype == BAGUA_FLOAT32) {
      v = static_cast<const float*>(x) + begin;
    } else {
      for (size_t i = 0; i < len; ++i) buf[i] = load(x, dtype, begin + i);
      v = buf;
    }
    compress_chunk(v, len, f, key, draw_keys, key.index_base + begin, out, nullptr);
    out += kHeaderBytes + code_bytes(len, f.bits);
  }
}

void minmax_compress_ef(const void* x, bagua_datatype_t dtype, size_t count, float* error, const MinMaxFormat& f,
                        const RoundingKey& key, uint8_t* out) {
  validate(f);
  check_dtype(dtype);
  float t[4096];
  DrawKeys draw_keys(key);
  for (size_t begin = 0; begin < count; begin += f.chunk) {
    size_t len = std::min(f.chunk, count - begin);
    float* e = error + begin;
    if (dtype == BAGUA_FLOAT32) {
      const float* xs = static_cast<const float*>(x) + begin;
      for (size_t i = 0; i < len; ++i) t[i] = xs[i] + e[i];
    } else {
      for (size_t i = 0; i < len; ++i) t[i] = load(x, dtype, begin + i) + e[i];
    }
    compress_chunk(t, len, f, key, draw_keys, key.index_base + begin, out, e);
    out += kHeaderBytes + code_bytes(len, f.bits);
  }
}

void minmax_decompress(const uint8_t* in, size_t count, const MinMaxFormat& f, void* x, bagua_datatype_t dtype) {
  check_dtype(dtype);
  float values[4096];
  for_each_chunk(in, count, f, [&](size_t begin, size_t len, const uint8_t* codes, const Grid& g) {
    if (dtype == BAGUA_FLOAT32) {
      decode_chunk(codes, len, f.bits, g, static_cast<float*>(x) + begin, false);
    } else {
      decode_chunk(codes, len, f.bits, g, values, false);
      for (size_t i = 0; i < len; ++i) store(x, dtype, begin + i, values[i]);
    }
  });
}

void minmax_decompress_accumulate(const uint8_t* in, size_t count, const MinMaxFormat& f, float* acc) {
  for_each_chunk(in, count, f, [&](size_t begin, size_t len, const uint8_t* codes, const Grid& g) {
    decode_chunk(codes, len, f.bits, g, acc + begin, true);
  });
}

}  // namespace bagua

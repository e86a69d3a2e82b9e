// The other compressed formats on the CPU: the fused owner step for min-max, BAGUA's MinMaxUInt8 layout,
// sign compression with scale, and casts. Layouts in docs/formats.md.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "base/error.h"
#include "kernels/cpu/quantize_simd.h"
#include "kernels/cpu/reduce.h"
#include "kernels/half.h"
#include "kernels/quantize.h"
#include "kernels/quantize_math.h"

namespace bagua {

namespace {
size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }
}  // namespace

void minmax_reduce_recompress(const uint8_t* const* inputs, int ninputs, const float* own, size_t count,
                              const MinMaxFormat& f, const RoundingKey& key, float* owner_error, uint8_t* out,
                              float* reduced) {
  validate(f);
  const size_t block = minmax_compressed_bytes(std::min(count, f.chunk), f);
  std::vector<float> acc(f.chunk);
  for (size_t begin = 0, offset = 0; begin < count; begin += f.chunk) {
    size_t len = std::min(f.chunk, count - begin);
    size_t bytes = minmax_compressed_bytes(len, f);
    std::memcpy(acc.data(), own + begin, len * sizeof(float));
    for (int k = 0; k < ninputs; ++k) minmax_decompress_accumulate(inputs[k] + offset, len, f, acc.data());
    if (reduced) std::memcpy(reduced + begin, acc.data(), len * sizeof(float));
    RoundingKey chunk_key = key;
    chunk_key.index_base = key.index_base + begin;
    if (owner_error)
      minmax_compress_ef(acc.data(), BAGUA_FLOAT32, len, owner_error + begin, f, chunk_key, out + offset);
    else
      minmax_compress(acc.data(), BAGUA_FLOAT32, len, f, chunk_key, out + offset);
    offset += bytes;
    (void)block;
  }
}

size_t bagua_u8_compressed_bytes(size_t count) { return count == 0 ? 0 : 32 + round_up(count, 32); }

void bagua_u8_compress(const float* x, size_t count, uint8_t* out) {
  if (count == 0) return;
  float lo = x[0], hi = x[0];
  for (size_t i = 1; i < count; ++i) {
    lo = x[i] < lo ? x[i] : lo;
    hi = x[i] > hi ? x[i] : hi;
  }
  std::memset(out, 0, bagua_u8_compressed_bytes(count));
  lo = unsigned_zero(lo);  // the sign of a zero depends on the order of the search (CUDA's differs)
  hi = unsigned_zero(hi);
  std::memcpy(out, &lo, 4);
  std::memcpy(out + 4, &hi, 4);
  float scale = 255.0f / (hi - lo + 1e-7f);
  float lower = std::rint(hi * scale) - 255.0f;
  uint8_t* codes = out + 32;
  for (size_t i = 0; i < count; ++i) codes[i] = u8_code(std::rint(x[i] * scale), lower);
}

void bagua_u8_decompress(const uint8_t* in, size_t count, float* x) {
  if (count == 0) return;
  float lo, hi;
  std::memcpy(&lo, in, 4);
  std::memcpy(&hi, in + 4, 4);
  float scale = 255.0f / (hi - lo + 1e-7f);
  float lower = std::rint(hi * scale) - 255.0f;
  for (size_t i = 0; i < count; ++i) x[i] = canonical_float((static_cast<float>(in[32 + i]) + lower) / scale);
}

size_t sign_compressed_bytes(size_t count, size_t chunk) {
  if (chunk == 0) fail(BAGUA_ERR_INVALID_ARGUMENT, "sign compression chunk is 0");
  size_t full = count / chunk, rest = count % chunk;
  auto block = [](size_t len) { return 4 + round_up((len + 7) / 8, 4); };
  return full * block(chunk) + (rest ? block(rest) : 0);
}

namespace {

// Sum of t^2 (t = x + e) over a chunk in fp64, in the order every implementation uses: element i goes to lane
// i mod 8, each lane in element order, then the lanes 0..7 in order. Eight independent lanes vectorize.
BAGUA_ISA_CLONES double sign_sum_squares(const float* x, const float* e, size_t len) {
  double lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  size_t i = 0;
  for (; i + 8 <= len; i += 8)
    for (int l = 0; l < 8; ++l) {
      double t = static_cast<double>(x[i + l] + (e ? e[i + l] : 0.0f));
      lane[l] += t * t;
    }
  for (; i < len; ++i) {
    double t = static_cast<double>(x[i] + (e ? e[i] : 0.0f));
    lane[i % 8] += t * t;
  }
  double sum = 0;
  for (int l = 0; l < 8; ++l) sum += lane[l];
  return sum;
}

}  // namespace

void sign_compress(const float* x, size_t count, size_t chunk, float* error, uint8_t* out) {
  const VectorLoops* loops = vector_loops();
  double sums[4];
  size_t summed_from = 0, summed_to = 0;  // chunks whose sums are in sums[], by first element
  for (size_t begin = 0; begin < count; begin += chunk) {
    size_t len = std::min(chunk, count - begin);
    const float* xc = x + begin;
    float* ec = error ? error + begin : nullptr;
    if (loops && begin >= summed_to && count - begin >= 4 * chunk) {  // four full chunks at once
      loops->sign_sum_squares4(xc, ec, chunk, sums);
      summed_from = begin;
      summed_to = begin + 4 * chunk;
    }
    double sum = begin < summed_to ? sums[(begin - summed_from) / chunk] : sign_sum_squares(xc, ec, len);
    float scale = canonical_float(static_cast<float>(std::sqrt(sum / static_cast<double>(len))));
    std::memcpy(out, &scale, 4);
    size_t used = (len + 7) / 8, bytes = round_up(used, 4);
    std::memset(out + 4, 0, bytes);
    size_t done = loops ? loops->sign_pack(xc, ec, len, scale, out + 4) : 0;
    for (size_t i = done; i < len; ++i) {  // the rest, LSB first
      float t = xc[i] + (ec ? ec[i] : 0.0f);
      bool positive = !(t < 0.0f);  // sign(0) = +1; NaN counts as +1
      out[4 + i / 8] |= static_cast<uint8_t>(static_cast<unsigned>(positive) << (i % 8));
      if (ec) ec[i] = feedback_residual(t - (positive ? scale : -scale));
    }
    out += 4 + bytes;
  }
}

namespace {
template <bool kAccumulate>
void sign_expand(const uint8_t* in, size_t count, size_t chunk, float* x) {
  const VectorLoops* loops = vector_loops();
  for (size_t begin = 0; begin < count; begin += chunk) {
    size_t len = std::min(chunk, count - begin);
    float scale;
    std::memcpy(&scale, in, 4);
    const float values[2] = {canonical_float(-scale), canonical_float(scale)};
    float* xc = x + begin;
    size_t done = loops ? loops->sign_expand(in + 4, len, scale, xc, kAccumulate) : 0;
    for (size_t i = done; i < len; ++i) {
      float v = values[(in[4 + i / 8] >> (i % 8)) & 1u];
      if constexpr (kAccumulate)
        xc[i] = canonical_float(xc[i] + v);
      else
        xc[i] = v;
    }
    in += 4 + round_up((len + 7) / 8, 4);
  }
}
}  // namespace

void sign_decompress(const uint8_t* in, size_t count, size_t chunk, float* x) {
  sign_expand<false>(in, count, chunk, x);
}
void sign_decompress_accumulate(const uint8_t* in, size_t count, size_t chunk, float* acc) {
  sign_expand<true>(in, count, chunk, acc);
}

void cast_from_float(const float* in, size_t count, void* out, bagua_datatype_t dtype) {
  auto* o = static_cast<uint16_t*>(out);
  if (dtype == BAGUA_FLOAT16)
    for (size_t i = 0; i < count; ++i) o[i] = float_to_fp16(in[i]);
  else if (dtype == BAGUA_BFLOAT16)
    for (size_t i = 0; i < count; ++i) o[i] = float_to_bf16(in[i]);
  else
    fail(BAGUA_ERR_INVALID_ARGUMENT, "casts go to float16 or bfloat16");
}

void cast_to_float(const void* in, bagua_datatype_t dtype, size_t count, float* out) {
  const auto* p = static_cast<const uint16_t*>(in);
  if (dtype == BAGUA_FLOAT16)
    for (size_t i = 0; i < count; ++i) out[i] = fp16_to_float(p[i]);
  else if (dtype == BAGUA_BFLOAT16)
    for (size_t i = 0; i < count; ++i) out[i] = bf16_to_float(p[i]);
  else
    fail(BAGUA_ERR_INVALID_ARGUMENT, "casts come from float16 or bfloat16");
}

}  // namespace bagua

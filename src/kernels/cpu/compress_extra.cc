// The other compressed formats on the CPU: the fused owner step for min-max, BAGUA's MinMaxUInt8 layout,
// sign compression with scale, and casts. Layouts in docs/formats.md.
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "core/error.h"
#include "kernels/half.h"
#include "kernels/quantize.h"

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
    if (owner_error) minmax_compress_ef(acc.data(), BAGUA_FLOAT32, len, owner_error + begin, f, chunk_key, out + offset);
    else minmax_compress(acc.data(), BAGUA_FLOAT32, len, f, chunk_key, out + offset);
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
  std::memcpy(out, &lo, 4);
  std::memcpy(out + 4, &hi, 4);
  float scale = 255.0f / (hi - lo + 1e-7f);
  float upper = std::rint(hi * scale);
  float lower = upper - 255.0f;
  uint8_t* codes = out + 32;
  for (size_t i = 0; i < count; ++i) {
    float q = std::rint(x[i] * scale);
    q = (q < upper ? q : upper) - lower;
    codes[i] = static_cast<uint8_t>(q < 0.0f ? 0.0f : q);  // NaN and values below the range give 0
  }
}

void bagua_u8_decompress(const uint8_t* in, size_t count, float* x) {
  if (count == 0) return;
  float lo, hi;
  std::memcpy(&lo, in, 4);
  std::memcpy(&hi, in + 4, 4);
  float scale = 255.0f / (hi - lo + 1e-7f);
  float lower = std::rint(hi * scale) - 255.0f;
  for (size_t i = 0; i < count; ++i) x[i] = (static_cast<float>(in[32 + i]) + lower) / scale;
}

size_t sign_compressed_bytes(size_t count, size_t chunk) {
  if (chunk == 0) fail(BAGUA_ERR_INVALID_ARGUMENT, "sign compression chunk is 0");
  size_t full = count / chunk, rest = count % chunk;
  auto block = [](size_t len) { return 4 + round_up((len + 7) / 8, 4); };
  return full * block(chunk) + (rest ? block(rest) : 0);
}

void sign_compress(const float* x, size_t count, size_t chunk, float* error, uint8_t* out) {
  for (size_t begin = 0; begin < count; begin += chunk) {
    size_t len = std::min(chunk, count - begin);
    const float* xc = x + begin;
    float* ec = error ? error + begin : nullptr;
    double sum_sq = 0;  // in double and in element order: the scale is the same on every implementation
    if (ec) {
      for (size_t i = 0; i < len; ++i) {
        float t = xc[i] + ec[i];
        sum_sq += static_cast<double>(t) * t;
      }
    } else {
      for (size_t i = 0; i < len; ++i) sum_sq += static_cast<double>(xc[i]) * xc[i];
    }
    float scale = static_cast<float>(std::sqrt(sum_sq / static_cast<double>(len)));
    std::memcpy(out, &scale, 4);
    size_t used = (len + 7) / 8, bytes = round_up(used, 4);
    for (size_t byte = 0; byte < used; ++byte) {  // eight elements per byte, LSB first
      size_t base = byte * 8, n = std::min<size_t>(8, len - base);
      unsigned bits = 0;
      for (size_t k = 0; k < n; ++k) {
        float t = xc[base + k] + (ec ? ec[base + k] : 0.0f);
        bool positive = !(t < 0.0f);  // sign(0) = +1; NaN counts as +1
        bits |= static_cast<unsigned>(positive) << k;
        if (ec) ec[base + k] = t - (positive ? scale : -scale);
      }
      out[4 + byte] = static_cast<uint8_t>(bits);
    }
    std::memset(out + 4 + used, 0, bytes - used);
    out += 4 + bytes;
  }
}

namespace {
template <bool kAccumulate>
void sign_expand(const uint8_t* in, size_t count, size_t chunk, float* x) {
  for (size_t begin = 0; begin < count; begin += chunk) {
    size_t len = std::min(chunk, count - begin);
    float scale;
    std::memcpy(&scale, in, 4);
    const float values[2] = {-scale, scale};
    float* xc = x + begin;
    for (size_t byte = 0; byte * 8 < len; ++byte) {
      unsigned bits = in[4 + byte];
      size_t base = byte * 8, n = std::min<size_t>(8, len - base);
      for (size_t k = 0; k < n; ++k) {
        float v = values[(bits >> k) & 1u];
        if constexpr (kAccumulate) xc[base + k] += v;
        else xc[base + k] = v;
      }
    }
    in += 4 + round_up((len + 7) / 8, 4);
  }
}
}  // namespace

void sign_decompress(const uint8_t* in, size_t count, size_t chunk, float* x) { sign_expand<false>(in, count, chunk, x); }
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

#include "algorithms/quantized/codec.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "algorithms/schedule.h"
#include "base/error.h"

namespace bagua {

Codec Codec::from_config(const bagua_compression_t* cfg) {
  if (cfg == nullptr) fail(BAGUA_ERR_INVALID_ARGUMENT, "cfg is NULL (start from BAGUA_COMPRESSION_INITIALIZER)");
  // size, magic, version in that order: a bad size means nothing after it may be read.
  if (cfg->size < sizeof(bagua_compression_t) || cfg->size > (1u << 20))
    fail(BAGUA_ERR_INVALID_ARGUMENT, "cfg->size {} is not a bagua_compression_t size (the first version has {} bytes)",
         cfg->size, sizeof(bagua_compression_t));
  if (cfg->magic != BAGUA_COMPRESSION_MAGIC)
    fail(BAGUA_ERR_INVALID_ARGUMENT,
         "cfg->magic is {:#x}, not BAGUA_COMPRESSION_MAGIC: start from BAGUA_COMPRESSION_INITIALIZER", cfg->magic);
  if (cfg->version < BAGUA_VERSION(0, 1, 0))
    fail(BAGUA_ERR_INVALID_ARGUMENT, "cfg->version {} predates bagua_compression_t", cfg->version);
  Codec c;
  switch (cfg->kind) {
    case BAGUA_COMPRESS_MINMAX:
    case BAGUA_COMPRESS_SIGN:
    case BAGUA_COMPRESS_FP16:
    case BAGUA_COMPRESS_BF16: c.kind_ = static_cast<bagua_compress_kind_t>(cfg->kind); break;
    default: fail(BAGUA_ERR_INVALID_ARGUMENT, "cfg->kind {} is not a bagua_compress_kind_t", cfg->kind);
  }
  c.format_.bits = c.kind_ == BAGUA_COMPRESS_MINMAX ? cfg->bits : 8;
  c.format_.chunk = cfg->chunk;
  validate(c.format_);  // bits and chunk, with the reason in the message
  if (cfg->stochastic != 0 && cfg->stochastic != 1) fail(BAGUA_ERR_INVALID_ARGUMENT, "cfg->stochastic must be 0 or 1");
  if (cfg->stochastic && c.kind_ != BAGUA_COMPRESS_MINMAX)
    fail(BAGUA_ERR_INVALID_ARGUMENT, "stochastic rounding is only defined for BAGUA_COMPRESS_MINMAX");
  if (cfg->error_feedback != 0 && cfg->error_feedback != 1)
    fail(BAGUA_ERR_INVALID_ARGUMENT, "cfg->error_feedback must be 0 or 1");
  if (cfg->hierarchical < BAGUA_HIERARCHICAL_AUTO || cfg->hierarchical > BAGUA_HIERARCHICAL_OFF)
    fail(BAGUA_ERR_INVALID_ARGUMENT, "cfg->hierarchical {} is not a bagua_hierarchical_t", cfg->hierarchical);
  c.stochastic_ = cfg->stochastic == 1;
  c.seed_ = cfg->seed;
  c.error_feedback_ = cfg->error_feedback == 1;
  c.hierarchical_ = static_cast<bagua_hierarchical_t>(cfg->hierarchical);
  return c;
}

std::string Codec::describe() const {
  switch (kind_) {
    case BAGUA_COMPRESS_MINMAX: return fmt::format("minmax{}{}", format_.bits, stochastic_ ? "-stochastic" : "");
    case BAGUA_COMPRESS_SIGN: return "sign";
    case BAGUA_COMPRESS_FP16: return "fp16";
    case BAGUA_COMPRESS_BF16: return "bf16";
  }
  return "?";
}

size_t Codec::compressed_bytes(size_t count) const { return bagua::compressed_bytes(spec(), count); }

void Codec::reduce_recompress(const uint8_t* const* inputs, int ninputs, const float* own, size_t count,
                              float* owner_error, const RoundingKey& key, uint8_t* out) const {
  // A few chunks at a time, in cache: one pass over own and the error instead of one per input. Whole chunks, so
  // the bytes and the order of the additions are those of the unfused steps.
  const size_t slice = format_.chunk * std::max<size_t>(1, 16384 / format_.chunk);
  std::vector<float> acc(std::min(slice, count));
  for (size_t begin = 0; begin < count; begin += slice) {
    if (begin > 0) progress_in_flight();
    const size_t n = std::min(slice, count - begin), at = compressed_bytes(begin);
    std::memcpy(acc.data(), own + begin, n * sizeof(float));
    for (int i = 0; i < ninputs; ++i) decompress_accumulate_floats(spec(), inputs[i] + at, n, acc.data());
    RoundingKey k = key;
    k.index_base += begin;
    compress_floats(spec(), acc.data(), n, owner_error ? owner_error + begin : nullptr, k, out + at);
  }
}

// Long vectors go slice by slice (whole chunks, so the bytes are those of one call), advancing the
// transfers in flight in between when the work overlaps a round (progress_in_flight).
template <typename F>
void Codec::by_slices(size_t count, F&& work) const {
  const size_t slice = format_.chunk * 256;
  for (size_t begin = 0; begin < count; begin += slice) {
    if (begin > 0) progress_in_flight();
    work(begin, std::min(slice, count - begin), compressed_bytes(begin));
  }
}

void Codec::compress(const float* x, size_t count, float* error, const RoundingKey& key, uint8_t* out) const {
  by_slices(count, [&](size_t begin, size_t n, size_t at) {
    RoundingKey k = key;
    k.index_base += begin;
    compress_floats(spec(), x + begin, n, error ? error + begin : nullptr, k, out + at);
  });
}

void Codec::decompress(const uint8_t* in, size_t count, float* out) const {
  by_slices(count, [&](size_t begin, size_t n, size_t at) { decompress_floats(spec(), in + at, n, out + begin); });
}

void Codec::decompress_accumulate(const uint8_t* in, size_t count, float* acc) const {
  by_slices(count,
            [&](size_t begin, size_t n, size_t at) { decompress_accumulate_floats(spec(), in + at, n, acc + begin); });
}

}  // namespace bagua

// One interface over the wire formats of the quantized allreduce (min-max, sign, fp16, bf16), so that the
// algorithm is written once. All arithmetic is on fp32; error feedback is t = x + e, send q(t), e = t - deq(q(t)).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "bagua/bagua.h"
#include "kernels/quantize.h"

namespace bagua {

class Codec {
 public:
  // Validates cfg (size/magic/version first; kind, bits, chunk, flags); throws INVALID_ARGUMENT naming the field.
  static Codec from_config(const bagua_compression_t* cfg);

  bagua_compress_kind_t kind() const { return kind_; }
  int bits() const { return format_.bits; }
  size_t chunk() const { return format_.chunk; }
  bool stochastic() const { return stochastic_; }
  uint64_t seed() const { return seed_; }
  bool error_feedback() const { return error_feedback_; }
  bagua_hierarchical_t hierarchical() const { return hierarchical_; }
  CompressionSpec spec() const { return {kind_, format_}; }
  std::string describe() const;

  // Wire bytes of count elements (each block of a scatter-reduce-allgather starts at a chunk boundary; for
  // a multiple of the chunk, the bytes of the elements before it).
  size_t compressed_bytes(size_t count) const;
  // out = q(x (+ error)); error, when not NULL, becomes what was lost. key.index_base is x[0]'s global index.
  void compress(const float* x, size_t count, float* error, const RoundingKey& key, uint8_t* out) const;
  void decompress(const uint8_t* in, size_t count, float* out) const;
  // acc[i] += deq(in)[i]
  void decompress_accumulate(const uint8_t* in, size_t count, float* acc) const;
  // The owner step, fused: out = q(own + deq(inputs[0]) + ... in input order), with owner_error (may be NULL).
  // The same bytes as decompress_accumulate into a copy of own, then compress.
  void reduce_recompress(const uint8_t* const* inputs, int ninputs, const float* own, size_t count, float* owner_error,
                         const RoundingKey& key, uint8_t* out) const;

 private:
  template <typename F>
  void by_slices(size_t count, F&& work) const;

  bagua_compress_kind_t kind_ = BAGUA_COMPRESS_MINMAX;
  MinMaxFormat format_;
  bool stochastic_ = false;
  uint64_t seed_ = 0;
  bool error_feedback_ = false;
  bagua_hierarchical_t hierarchical_ = BAGUA_HIERARCHICAL_AUTO;
};

}  // namespace bagua

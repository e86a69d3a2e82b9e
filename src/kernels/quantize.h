// Min-max quantization of fp32/fp16/bf16 vectors into b-bit codes (b = 1, 2, 4, 8), chunk by chunk, with
// nearest (ties to even) or stochastic rounding, optional error feedback, and fused decompress-accumulate.
// The byte layout is docs/formats.md's "minmax v1". This is the CPU reference implementation.
#pragma once

#include <cstddef>
#include <cstdint>

#include "bagua/bagua.h"

namespace bagua {

struct MinMaxFormat {
  int bits = 8;         // 1, 2, 4 or 8
  size_t chunk = 1024;  // elements per min/max chunk, 256 to 4096
};

// Stochastic rounding draws r in [0, 2^16) from a counter-based hash of (seed, step, rank, element index), so a
// run is reproducible and any implementation (CPU, CUDA) draws the same numbers (quantize_math.h).
struct RoundingKey {
  bool stochastic = false;
  uint64_t seed = 0;
  uint64_t step = 0;
  uint32_t rank = 0;
  uint64_t index_base = 0;  // global index of element 0 of this call
};

// Throws INVALID_ARGUMENT for bits not in {1, 2, 4, 8} or a chunk outside [256, 4096].
void validate(const MinMaxFormat& format);
size_t minmax_compressed_bytes(size_t count, const MinMaxFormat& format);
// The draw r in [0, 2^16) of one element (stochastic_code in quantize_math.h turns it into a code).
uint32_t stochastic_draw(const RoundingKey& key, uint64_t index);

// x: count elements of dtype (BAGUA_FLOAT32, BAGUA_FLOAT16 or BAGUA_BFLOAT16); out: minmax_compressed_bytes.
void minmax_compress(const void* x, bagua_datatype_t dtype, size_t count, const MinMaxFormat& format,
                     const RoundingKey& key, uint8_t* out);
// Error feedback: t = x + e; out = q(t); e = t - deq(q(t)). error has count floats.
void minmax_compress_ef(const void* x, bagua_datatype_t dtype, size_t count, float* error, const MinMaxFormat& format,
                        const RoundingKey& key, uint8_t* out);
void minmax_decompress(const uint8_t* in, size_t count, const MinMaxFormat& format, void* x, bagua_datatype_t dtype);
// acc[i] += deq(in)[i], in one pass.
void minmax_decompress_accumulate(const uint8_t* in, size_t count, const MinMaxFormat& format, float* acc);

// Owner step of a compressed scatter-reduce-allgather, fused chunk by chunk: acc = own + sum of deq(inputs),
// then out = q(acc) (with the owner's error feedback when owner_error is not NULL: acc += e first, then
// e = acc - deq(out)). reduced, when not NULL, receives acc (before error feedback).
void minmax_reduce_recompress(const uint8_t* const* inputs, int ninputs, const float* own, size_t count,
                              const MinMaxFormat& format, const RoundingKey& key, float* owner_error, uint8_t* out,
                              float* reduced);

// BAGUA's MinMaxUInt8 layout (docs/formats.md "bagua-minmax-u8"): one range per call, 8-bit codes.
size_t bagua_u8_compressed_bytes(size_t count);
void bagua_u8_compress(const float* x, size_t count, uint8_t* out);
void bagua_u8_decompress(const uint8_t* in, size_t count, float* x);

// Sign compression with scale (1-bit Adam style, docs/formats.md "sign v1"): per chunk, scale = ||x||2 / sqrt(d),
// one bit per element (1 for x >= 0, so sign(0) = +1), decompressing to +-scale. With error feedback when
// error is not NULL (t = x + e; e = t - deq(q(t))).
size_t sign_compressed_bytes(size_t count, size_t chunk);
void sign_compress(const float* x, size_t count, size_t chunk, float* error, uint8_t* out);
void sign_decompress(const uint8_t* in, size_t count, size_t chunk, float* x);
// acc[i] += deq(in)[i]
void sign_decompress_accumulate(const uint8_t* in, size_t count, size_t chunk, float* acc);

// fp32 <-> fp16/bf16, round to nearest even (kernels/half.h rules).
void cast_from_float(const float* in, size_t count, void* out, bagua_datatype_t dtype);
void cast_to_float(const void* in, bagua_datatype_t dtype, size_t count, float* out);

// One wire format of the quantized allreduce on fp32 values: min-max (bits, chunk), sign (chunk), or fp16/bf16
// (a cast; with error feedback e = t - float(cast(t)) as the others). key.stochastic selects stochastic min-max.
struct CompressionSpec {
  bagua_compress_kind_t kind = BAGUA_COMPRESS_MINMAX;
  MinMaxFormat format;
};
size_t compressed_bytes(const CompressionSpec& spec, size_t count);
// out = q(x (+ error)); error, when not NULL, becomes what was lost. The CPU reference; the CUDA versions
// (kernels/cuda/cuda_kernels.h) give the same bytes.
void compress_floats(const CompressionSpec& spec, const float* x, size_t count, float* error, const RoundingKey& key,
                     uint8_t* out);
void decompress_floats(const CompressionSpec& spec, const uint8_t* in, size_t count, float* out);
// acc[i] += deq(in)[i] (a NaN sum is the canonical NaN)
void decompress_accumulate_floats(const CompressionSpec& spec, const uint8_t* in, size_t count, float* acc);
// Low-precision decentralized SGD's difference to send (algorithms/gossip/lpdec.h), element by element:
// d = self_weight * self; d += weights[k] * replicas[k] in order; d = (x + (d - self)) - self, a NaN canonical.
constexpr int kMaxGossipReplicas = 8;
void gossip_difference(float* diff, const float* x, const float* self, const float* const* replicas,
                       const float* weights, int nreplicas, float self_weight, size_t count);
// fp32 <-> fp16/bf16 (one side is BAGUA_FLOAT32; the same types copy).
void convert_floats(void* dst, bagua_datatype_t dst_type, const void* src, bagua_datatype_t src_type, size_t count);

}  // namespace bagua

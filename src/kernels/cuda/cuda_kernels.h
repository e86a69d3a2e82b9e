// CUDA versions of the CPU kernels, on device memory, stream-ordered. Same bits as the CPU reference
// (kernels/cpu/reduce.h, kernels/quantize.h): compiled with -fmad=false, no fast-math, shared integer
// conversions (kernels/half.h). Without a CUDA build these throw BAGUA_ERR_NOT_SUPPORTED.
#pragma once

#include <cstddef>
#include <cstdint>

#include "bagua/bagua.h"
#include "kernels/late_span.h"
#include "kernels/quantize.h"

namespace bagua::cuda {

// A copy by the multiprocessors instead of the copy engines (docs/cuda.md, "Copies by kernel"): both pointers in memory
// that kernels on the stream's device can access (its device memory, managed memory, mapped pinned host memory).
void copy_bytes(void* dst, const void* src, size_t bytes, void* stream);
void reduce_from(void* dst, const void* a, const void* b, size_t count, bagua_datatype_t dtype, bagua_redop_t op,
                 void* stream);
void divide_by(void* dst, size_t count, bagua_datatype_t dtype, int divisor, void* stream);
// Every dsts[d] = (srcs[0] op srcs[1] op ... left to right) / divisor (0: no division), in one pass per
// kMaxReduceSpans sources: the bits of reduce_from over the sources in turn, then divide_by. srcs[0] may be
// dsts[0] (in place); spans otherwise do not overlap. Pointer arrays on the host.
constexpr int kMaxReduceSpans = 16;
void reduce_spans(void* const* dsts, int ndst, const void* const* srcs, int nsrc, size_t count, bagua_datatype_t dtype,
                  bagua_redop_t op, int divisor, void* stream);
// copy_bytes and reduce_spans between spans whose addresses are read when the kernel runs (kernels/late_span.h):
// nothing is copied or reduced when a base word is 0 (the host sets all of a call's words or none).
void late_copy_bytes(LateSpan dst, LateSpan src, size_t bytes, void* stream);
void late_reduce_spans(const LateSpan* dsts, int ndst, const LateSpan* srcs, int nsrc, size_t count,
                       bagua_datatype_t dtype, bagua_redop_t op, int divisor, void* stream);
// Asynchronous averaging's correction (kernels/cpu/reduce.h's average_correct), float32 or float64.
void average_correct(void* x, const void* sum, const void* snapshot, size_t count, bagua_datatype_t dtype, int n,
                     void* stream);
// fp32 input; out holds minmax_compressed_bytes(count, format).
void minmax_compress(const float* x, size_t count, const MinMaxFormat& format, const RoundingKey& key, uint8_t* out,
                     void* stream);
// Any of fp32/fp16/bf16 input, with error feedback when error is not NULL (as the CPU's minmax_compress_ef).
void minmax_compress_typed(const void* x, bagua_datatype_t dtype, size_t count, float* error,
                           const MinMaxFormat& format, const RoundingKey& key, uint8_t* out, void* stream);
void minmax_decompress(const uint8_t* in, size_t count, const MinMaxFormat& format, void* x, bagua_datatype_t dtype,
                       void* stream);
void minmax_decompress_accumulate(const uint8_t* in, size_t count, const MinMaxFormat& format, float* acc,
                                  void* stream);
// inputs: device pointers (the array itself on the host). scratch: count floats of device memory, used with more
// than 16 inputs.
void minmax_reduce_recompress(const uint8_t* const* inputs, int ninputs, const float* own, size_t count,
                              const MinMaxFormat& format, const RoundingKey& key, float* owner_error, uint8_t* out,
                              float* reduced, float* scratch, void* stream);
// Sign: chunk 1 to 4096 elements (the codec allows 256 to 4096).
void sign_compress(const float* x, size_t count, size_t chunk, float* error, uint8_t* out, void* stream);
void sign_decompress(const uint8_t* in, size_t count, size_t chunk, float* x, void* stream);
void cast_from_float(const float* in, size_t count, void* out, bagua_datatype_t dtype, void* stream);
void cast_to_float(const void* in, bagua_datatype_t dtype, size_t count, float* out, void* stream);
// The quantized allreduce's wire formats (kernels/quantize.h's CompressionSpec) on fp32 values.
void compress_floats(const CompressionSpec& spec, const float* x, size_t count, float* error, const RoundingKey& key,
                     uint8_t* out, void* stream);
void decompress_floats(const CompressionSpec& spec, const uint8_t* in, size_t count, float* out, bool accumulate,
                       void* stream);
// kernels/quantize.h's gossip_difference (replicas: device pointers in a host array).
void gossip_difference(float* diff, const float* x, const float* self, const float* const* replicas,
                       const float* weights, int nreplicas, float self_weight, size_t count, void* stream);
void bagua_u8_compress(const float* x, size_t count, uint8_t* out, void* stream);
void bagua_u8_decompress(const uint8_t* in, size_t count, float* x, void* stream);
void synchronize(void* stream);
// Loads every kernel the device data path launches (reductions, compression, conversions), so that none is first
// loaded during a call (CUDA's lazy loading). load_kernels calls the other two.
void load_kernels();
void load_quantize_kernels();
void load_extra_kernels();

}  // namespace bagua::cuda

// CUDA versions of the CPU kernels, on device memory, stream-ordered. Same bits as the CPU reference
// (kernels/cpu/reduce.h, kernels/quantize.h): compiled with -fmad=false, no fast-math, shared integer
// conversions (kernels/half.h). Without a CUDA build these throw BAGUA_ERR_NOT_SUPPORTED.
#pragma once

#include <cstddef>
#include <cstdint>

#include "bagua/bagua.h"
#include "kernels/quantize.h"

namespace bagua::cuda {

void reduce_from(void* dst, const void* a, const void* b, size_t count, bagua_datatype_t dtype, bagua_redop_t op,
                 void* stream);
void divide_by(void* dst, size_t count, bagua_datatype_t dtype, int divisor, void* stream);
// fp32 input; out holds minmax_compressed_bytes(count, format).
void minmax_compress(const float* x, size_t count, const MinMaxFormat& format, const RoundingKey& key, uint8_t* out,
                     void* stream);
void minmax_decompress_accumulate(const uint8_t* in, size_t count, const MinMaxFormat& format, float* acc,
                                  void* stream);
void synchronize(void* stream);

}  // namespace bagua::cuda

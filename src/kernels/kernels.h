// One host-callable entry per kernel, chosen by where the memory lives: CUDA kernels for device (or managed)
// pointers, stream-ordered on `stream`; the CPU loops otherwise. Both give the same bits.
#pragma once

#include "kernels/cpu/reduce.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/memory_type.h"
#include "kernels/quantize.h"

namespace bagua::kernels {

inline bool on_device(const void* p) { return p != nullptr && detect_memory_type(p) != MemoryType::kHost; }

inline void reduce_from(void* dst, const void* a, const void* b, size_t count, bagua_datatype_t dtype, bagua_redop_t op,
                        void* stream) {
  if (on_device(dst))
    cuda::reduce_from(dst, a, b, count, dtype, op, stream);
  else
    bagua::reduce_from(dst, a, b, count, dtype, op);
}

inline void divide_by(void* dst, size_t count, bagua_datatype_t dtype, int divisor, void* stream) {
  if (on_device(dst))
    cuda::divide_by(dst, count, dtype, divisor, stream);
  else
    bagua::divide_by(dst, count, dtype, divisor);
}

inline void minmax_compress(const float* x, size_t count, const MinMaxFormat& format, const RoundingKey& key,
                            uint8_t* out, void* stream) {
  if (on_device(x))
    cuda::minmax_compress(x, count, format, key, out, stream);
  else
    bagua::minmax_compress(x, BAGUA_FLOAT32, count, format, key, out);
}

inline void minmax_decompress_accumulate(const uint8_t* in, size_t count, const MinMaxFormat& format, float* acc,
                                         void* stream) {
  if (on_device(acc))
    cuda::minmax_decompress_accumulate(in, count, format, acc, stream);
  else
    bagua::minmax_decompress_accumulate(in, count, format, acc);
}

inline void minmax_compress_ef(const void* x, bagua_datatype_t dtype, size_t count, float* error,
                               const MinMaxFormat& format, const RoundingKey& key, uint8_t* out, void* stream) {
  if (on_device(x))
    cuda::minmax_compress_typed(x, dtype, count, error, format, key, out, stream);
  else
    bagua::minmax_compress_ef(x, dtype, count, error, format, key, out);
}

inline void minmax_decompress(const uint8_t* in, size_t count, const MinMaxFormat& format, void* x,
                              bagua_datatype_t dtype, void* stream) {
  if (on_device(x))
    cuda::minmax_decompress(in, count, format, x, dtype, stream);
  else
    bagua::minmax_decompress(in, count, format, x, dtype);
}

inline void sign_compress(const float* x, size_t count, size_t chunk, float* error, uint8_t* out, void* stream) {
  if (on_device(x))
    cuda::sign_compress(x, count, chunk, error, out, stream);
  else
    bagua::sign_compress(x, count, chunk, error, out);
}

inline void sign_decompress(const uint8_t* in, size_t count, size_t chunk, float* x, void* stream) {
  if (on_device(x))
    cuda::sign_decompress(in, count, chunk, x, stream);
  else
    bagua::sign_decompress(in, count, chunk, x);
}

inline void cast_from_float(const float* in, size_t count, void* out, bagua_datatype_t dtype, void* stream) {
  if (on_device(in))
    cuda::cast_from_float(in, count, out, dtype, stream);
  else
    bagua::cast_from_float(in, count, out, dtype);
}

inline void cast_to_float(const void* in, bagua_datatype_t dtype, size_t count, float* out, void* stream) {
  if (on_device(in))
    cuda::cast_to_float(in, dtype, count, out, stream);
  else
    bagua::cast_to_float(in, dtype, count, out);
}

}  // namespace bagua::kernels

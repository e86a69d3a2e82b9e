// Builds without CUDA: the CUDA kernels are not there; every call says so.
#include "base/error.h"
#include "kernels/cuda/cuda_kernels.h"

namespace bagua::cuda {

namespace {
[[noreturn]] void no_cuda() { fail(BAGUA_ERR_NOT_SUPPORTED, "this bagua was built without CUDA"); }
}  // namespace

void copy_bytes(void*, const void*, size_t, void*) { no_cuda(); }
void reduce_from(void*, const void*, const void*, size_t, bagua_datatype_t, bagua_redop_t, void*) { no_cuda(); }
void divide_by(void*, size_t, bagua_datatype_t, int, void*) { no_cuda(); }
void reduce_spans(void* const*, int, const void* const*, int, size_t, bagua_datatype_t, bagua_redop_t, int, void*) {
  no_cuda();
}
void late_copy_bytes(LateSpan, LateSpan, size_t, void*) { no_cuda(); }
void late_reduce_spans(const LateSpan*, int, const LateSpan*, int, size_t, bagua_datatype_t, bagua_redop_t, int,
                       void*) {
  no_cuda();
}
void average_correct(void*, const void*, const void*, size_t, bagua_datatype_t, int, void*) { no_cuda(); }
void minmax_compress(const float*, size_t, const MinMaxFormat&, const RoundingKey&, uint8_t*, void*) { no_cuda(); }
void minmax_decompress_accumulate(const uint8_t*, size_t, const MinMaxFormat&, float*, void*) { no_cuda(); }
void synchronize(void*) { no_cuda(); }
void load_kernels() {}
void load_quantize_kernels() {}
void load_extra_kernels() {}
void minmax_compress_typed(const void*, bagua_datatype_t, size_t, float*, const MinMaxFormat&, const RoundingKey&,
                           uint8_t*, void*) {
  no_cuda();
}
void minmax_decompress(const uint8_t*, size_t, const MinMaxFormat&, void*, bagua_datatype_t, void*) { no_cuda(); }
void minmax_reduce_recompress(const uint8_t* const*, int, const float*, size_t, const MinMaxFormat&, const RoundingKey&,
                              float*, uint8_t*, float*, float*, void*) {
  no_cuda();
}
void sign_compress(const float*, size_t, size_t, float*, uint8_t*, void*) { no_cuda(); }
void sign_decompress(const uint8_t*, size_t, size_t, float*, void*) { no_cuda(); }
void cast_from_float(const float*, size_t, void*, bagua_datatype_t, void*) { no_cuda(); }
void cast_to_float(const void*, bagua_datatype_t, size_t, float*, void*) { no_cuda(); }
void compress_floats(const CompressionSpec&, const float*, size_t, float*, const RoundingKey&, uint8_t*, void*) {
  no_cuda();
}
void decompress_floats(const CompressionSpec&, const uint8_t*, size_t, float*, bool, void*) { no_cuda(); }
void gossip_difference(float*, const float*, const float*, const float* const*, const float*, int, float, size_t,
                       void*) {
  no_cuda();
}
void bagua_u8_compress(const float*, size_t, uint8_t*, void*) { no_cuda(); }
void bagua_u8_decompress(const uint8_t*, size_t, float*, void*) { no_cuda(); }

}  // namespace bagua::cuda

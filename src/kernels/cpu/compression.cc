// The quantized allreduce's wire formats on fp32 values (kernels/quantize.h's CompressionSpec), over the CPU kernels.
#include <cstring>
#include <vector>

#include "base/error.h"
#include "kernels/cpu/reduce.h"
#include "kernels/quantize.h"
#include "kernels/quantize_math.h"

namespace bagua {

namespace {
bagua_datatype_t cast_type(const CompressionSpec& spec) {
  return spec.kind == BAGUA_COMPRESS_FP16 ? BAGUA_FLOAT16 : BAGUA_BFLOAT16;
}
}  // namespace

size_t compressed_bytes(const CompressionSpec& spec, size_t count) {
  switch (spec.kind) {
    case BAGUA_COMPRESS_MINMAX: return minmax_compressed_bytes(count, spec.format);
    case BAGUA_COMPRESS_SIGN: return sign_compressed_bytes(count, spec.format.chunk);
    case BAGUA_COMPRESS_FP16:
    case BAGUA_COMPRESS_BF16: return 2 * count;
  }
  return 0;
}

void compress_floats(const CompressionSpec& spec, const float* x, size_t count, float* error, const RoundingKey& key,
                     uint8_t* out) {
  if (count == 0) return;
  switch (spec.kind) {
    case BAGUA_COMPRESS_MINMAX:
      if (error)
        minmax_compress_ef(x, BAGUA_FLOAT32, count, error, spec.format, key, out);
      else
        minmax_compress(x, BAGUA_FLOAT32, count, spec.format, key, out);
      return;
    case BAGUA_COMPRESS_SIGN: sign_compress(x, count, spec.format.chunk, error, out); return;
    case BAGUA_COMPRESS_FP16:
    case BAGUA_COMPRESS_BF16: {
      if (error == nullptr) {
        cast_from_float(x, count, out, cast_type(spec));
        return;
      }
      std::vector<float> t(x, x + count), back(count);
      for (size_t i = 0; i < count; ++i) t[i] = canonical_float(t[i] + error[i]);  // (the GPU's NaN)
      cast_from_float(t.data(), count, out, cast_type(spec));
      cast_to_float(out, cast_type(spec), count, back.data());
      for (size_t i = 0; i < count; ++i) error[i] = feedback_residual(t[i] - back[i]);
      return;
    }
  }
  fail(BAGUA_ERR_INVALID_ARGUMENT, "compression kind {} is not a bagua_compress_kind_t", static_cast<int>(spec.kind));
}

void decompress_floats(const CompressionSpec& spec, const uint8_t* in, size_t count, float* out) {
  if (count == 0) return;
  switch (spec.kind) {
    case BAGUA_COMPRESS_MINMAX: minmax_decompress(in, count, spec.format, out, BAGUA_FLOAT32); return;
    case BAGUA_COMPRESS_SIGN: sign_decompress(in, count, spec.format.chunk, out); return;
    case BAGUA_COMPRESS_FP16:
    case BAGUA_COMPRESS_BF16: cast_to_float(in, cast_type(spec), count, out); return;
  }
  fail(BAGUA_ERR_INVALID_ARGUMENT, "compression kind {} is not a bagua_compress_kind_t", static_cast<int>(spec.kind));
}

void decompress_accumulate_floats(const CompressionSpec& spec, const uint8_t* in, size_t count, float* acc) {
  if (count == 0) return;
  if (spec.kind == BAGUA_COMPRESS_MINMAX) {
    minmax_decompress_accumulate(in, count, spec.format, acc);
    return;
  }
  if (spec.kind == BAGUA_COMPRESS_SIGN) {
    sign_decompress_accumulate(in, count, spec.format.chunk, acc);
    return;
  }
  std::vector<float> values(count);
  decompress_floats(spec, in, count, values.data());
  reduce_from(acc, acc, values.data(), count, BAGUA_FLOAT32, BAGUA_SUM);
}

void gossip_difference(float* diff, const float* x, const float* self, const float* const* replicas,
                       const float* weights, int nreplicas, float self_weight, size_t count) {
  for (size_t i = 0; i < count; ++i) diff[i] = self_weight * self[i];
  for (int k = 0; k < nreplicas; ++k)
    for (size_t i = 0; i < count; ++i) diff[i] += weights[k] * replicas[k][i];
  for (size_t i = 0; i < count; ++i) diff[i] = canonical_float((x[i] + (diff[i] - self[i])) - self[i]);
}

void convert_floats(void* dst, bagua_datatype_t dst_type, const void* src, bagua_datatype_t src_type, size_t count) {
  if (dst_type == src_type && (dst_type == BAGUA_FLOAT32 || dst_type == BAGUA_FLOAT16 || dst_type == BAGUA_BFLOAT16)) {
    std::memmove(dst, src, count * (dst_type == BAGUA_FLOAT32 ? 4 : 2));
  } else if (src_type == BAGUA_FLOAT32) {
    cast_from_float(static_cast<const float*>(src), count, dst, dst_type);
  } else if (dst_type == BAGUA_FLOAT32) {
    cast_to_float(src, src_type, count, static_cast<float*>(dst));
  } else {
    fail(BAGUA_ERR_INVALID_ARGUMENT, "conversions go between float32 and float16 or bfloat16");
  }
}

}  // namespace bagua

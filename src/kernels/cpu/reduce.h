// CPU reductions: plain scalar loops, the reference every other implementation must match bit for bit.
// Arithmetic rules (DESIGN.md): integers wrap (computed unsigned); avg is sum here and divide_by() after;
// fp16/bf16 go through fp32 and are rounded once per call.
#pragma once

#include <cstddef>

#include "bagua/bagua.h"

namespace bagua {

// dst[i] = dst[i] op src[i] for i < count. For BAGUA_AVG this is the sum.
void reduce_into(void* dst, const void* src, size_t count, bagua_datatype_t dtype, bagua_redop_t op);
// dst[i] = a[i] op b[i].
void reduce_from(void* dst, const void* a, const void* b, size_t count, bagua_datatype_t dtype, bagua_redop_t op);
// dst[i] /= divisor: truncation toward zero for integers, IEEE division (fp16/bf16 via fp32) for floats.
void divide_by(void* dst, size_t count, bagua_datatype_t dtype, int divisor);

}  // namespace bagua

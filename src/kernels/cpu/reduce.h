// CPU reductions. One set of loops (reduce_impl.h) compiled for the baseline, AVX2 and AVX-512, chosen at
// run time; the scalar build is the reference the others (and CUDA) must match bit for bit.
// Arithmetic rules (docs/architecture.md): integers wrap (computed unsigned); avg is sum here and divide_by() after;
// fp16/bf16 go through fp32 and are rounded once per call. A NaN result, from any op (min and max
// propagate a NaN from either input), is the canonical positive quiet NaN of the type: 0x7fc00000,
// 0x7ff8000000000000, fp16 0x7e00, bf16 0x7fc0.
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

// x[i] = average_correction(x[i], sum[i], snapshot[i], n) (reduce_math.h), for BAGUA_FLOAT32 or BAGUA_FLOAT64.
void average_correct(void* x, const void* sum, const void* snapshot, size_t count, bagua_datatype_t dtype, int n);

enum class CpuKernels { kScalar = 0, kAvx2 = 1, kAvx512 = 2 };
CpuKernels cpu_kernels();                      // the variant in use (BAGUA_CPU_KERNELS may lower it)
bool cpu_kernels_available(CpuKernels which);  // what this CPU can run
const char* cpu_kernels_name(CpuKernels which);
// A given variant, for tests and benchmarks.
void reduce_from_with(CpuKernels which, void* dst, const void* a, const void* b, size_t count, bagua_datatype_t dtype,
                      bagua_redop_t op);
void divide_by_with(CpuKernels which, void* dst, size_t count, bagua_datatype_t dtype, int divisor);

}  // namespace bagua

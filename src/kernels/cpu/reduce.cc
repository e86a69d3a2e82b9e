// Picks the reduction loops for this CPU at run time: AVX-512 (with F16C), AVX2 (with F16C), or the
// baseline build. All three produce the same bits (tests/unit/test_reduce.cc compares them).
#include "kernels/cpu/reduce.h"

#include "base/env.h"
#include "kernels/dtype.h"

#include <cpuid.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>

namespace bagua {

#define BAGUA_DECLARE_VARIANT(ns)                                                                                    \
  namespace ns {                                                                                                     \
  void reduce_from(void* dst, const void* a, const void* b, size_t count, bagua_datatype_t dtype, bagua_redop_t op); \
  void divide_by(void* dst, size_t count, bagua_datatype_t dtype, int divisor);                                      \
  }
BAGUA_DECLARE_VARIANT(cpu_scalar)
BAGUA_DECLARE_VARIANT(cpu_avx2)
BAGUA_DECLARE_VARIANT(cpu_avx512)
#undef BAGUA_DECLARE_VARIANT

namespace {

struct Variant {
  CpuKernels which;
  void (*reduce_from)(void*, const void*, const void*, size_t, bagua_datatype_t, bagua_redop_t);
  void (*divide_by)(void*, size_t, bagua_datatype_t, int);
};

const Variant kVariants[] = {
    {CpuKernels::kScalar, cpu_scalar::reduce_from, cpu_scalar::divide_by},
    {CpuKernels::kAvx2, cpu_avx2::reduce_from, cpu_avx2::divide_by},
    {CpuKernels::kAvx512, cpu_avx512::reduce_from, cpu_avx512::divide_by},
};

// F16C from CPUID directly: clang's __builtin_cpu_supports does not know the name.
bool has_f16c() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & bit_F16C) != 0;
}

const Variant* select_variant() {
  CpuKernels best = CpuKernels::kScalar;
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2") && has_f16c()) best = CpuKernels::kAvx2;
  if (best == CpuKernels::kAvx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl"))
    best = CpuKernels::kAvx512;
  // BAGUA_CPU_KERNELS=scalar|avx2|avx512 may lower the choice (never raise it past the CPU).
  if (const char* forced = env_get("BAGUA_CPU_KERNELS")) {
    if (std::strcmp(forced, "scalar") == 0)
      best = CpuKernels::kScalar;
    else if (std::strcmp(forced, "avx2") == 0 && best >= CpuKernels::kAvx2)
      best = CpuKernels::kAvx2;
  }
  return &kVariants[static_cast<int>(best)];
}

const Variant& variant() {
  static const Variant* chosen = select_variant();
  return *chosen;
}

}  // namespace

CpuKernels cpu_kernels() { return variant().which; }

bool cpu_kernels_available(CpuKernels which) {
  __builtin_cpu_init();
  switch (which) {
    case CpuKernels::kScalar: return true;
    case CpuKernels::kAvx2: return __builtin_cpu_supports("avx2") && has_f16c();
    case CpuKernels::kAvx512:
      return cpu_kernels_available(CpuKernels::kAvx2) && __builtin_cpu_supports("avx512f") &&
             __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
  }
  return false;
}

const char* cpu_kernels_name(CpuKernels which) {
  switch (which) {
    case CpuKernels::kScalar: return "scalar";
    case CpuKernels::kAvx2: return "avx2";
    case CpuKernels::kAvx512: return "avx512";
  }
  return "unknown";
}

namespace {

// The loops read and write typed elements, so a buffer that is not aligned to its element size (user buffers may
// be anywhere) goes through aligned stack copies, a chunk at a time; aligned ones go straight through.
bool aligned(const void* p, size_t element) { return reinterpret_cast<uintptr_t>(p) % element == 0; }
constexpr size_t kChunkBytes = 4096;

void reduce_with(const Variant& v, void* dst, const void* a, const void* b, size_t count, bagua_datatype_t dtype,
                 bagua_redop_t op) {
  const size_t es = datatype_size(dtype);
  if (aligned(dst, es) && aligned(a, es) && aligned(b, es)) return v.reduce_from(dst, a, b, count, dtype, op);
  alignas(64) uint8_t x[kChunkBytes], y[kChunkBytes];
  const size_t per_chunk = kChunkBytes / es;
  for (size_t done = 0; done < count; done += per_chunk) {
    const size_t n = std::min(per_chunk, count - done), bytes = n * es;
    std::memcpy(x, static_cast<const uint8_t*>(a) + done * es, bytes);
    std::memcpy(y, static_cast<const uint8_t*>(b) + done * es, bytes);
    v.reduce_from(x, x, y, n, dtype, op);
    std::memcpy(static_cast<uint8_t*>(dst) + done * es, x, bytes);
  }
}

void divide_with(const Variant& v, void* dst, size_t count, bagua_datatype_t dtype, int divisor) {
  const size_t es = datatype_size(dtype);
  if (aligned(dst, es)) return v.divide_by(dst, count, dtype, divisor);
  alignas(64) uint8_t x[kChunkBytes];
  const size_t per_chunk = kChunkBytes / es;
  for (size_t done = 0; done < count; done += per_chunk) {
    const size_t n = std::min(per_chunk, count - done), bytes = n * es;
    std::memcpy(x, static_cast<uint8_t*>(dst) + done * es, bytes);
    v.divide_by(x, n, dtype, divisor);
    std::memcpy(static_cast<uint8_t*>(dst) + done * es, x, bytes);
  }
}

}  // namespace

void reduce_from(void* dst, const void* a, const void* b, size_t count, bagua_datatype_t dtype, bagua_redop_t op) {
  reduce_with(variant(), dst, a, b, count, dtype, op);
}

void reduce_into(void* dst, const void* src, size_t count, bagua_datatype_t dtype, bagua_redop_t op) {
  reduce_with(variant(), dst, dst, src, count, dtype, op);
}

void divide_by(void* dst, size_t count, bagua_datatype_t dtype, int divisor) {
  divide_with(variant(), dst, count, dtype, divisor);
}

void reduce_from_with(CpuKernels which, void* dst, const void* a, const void* b, size_t count, bagua_datatype_t dtype,
                      bagua_redop_t op) {
  reduce_with(kVariants[static_cast<int>(which)], dst, a, b, count, dtype, op);
}

void divide_by_with(CpuKernels which, void* dst, size_t count, bagua_datatype_t dtype, int divisor) {
  divide_with(kVariants[static_cast<int>(which)], dst, count, dtype, divisor);
}

}  // namespace bagua

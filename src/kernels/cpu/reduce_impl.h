// The reduction loops, written once and compiled several times: reduce_scalar.cc (baseline x86-64),
// reduce_avx2.cc and reduce_avx512.cc (with their -m flags, so the compiler vectorizes the same loops).
// Include only from those files, after defining BAGUA_REDUCE_NAMESPACE.
#if defined(__AVX2__)
#include <immintrin.h>
#endif

#include <cstdint>
#include <limits>
#include <type_traits>

#include "kernels/cpu/reduce.h"
#include "kernels/half.h"
#include "kernels/reduce_math.h"

namespace bagua::BAGUA_REDUCE_NAMESPACE {

namespace {

struct Fp16 {
  uint16_t bits;
};
struct Bf16 {
  uint16_t bits;
};

// How each element type is read into its arithmetic type and written back.
template <typename T>
struct Arith {
  using Wide = T;
  static Wide load(T v) { return v; }
  static T store(Wide v) { return v; }
};
template <>
struct Arith<Fp16> {
  using Wide = float;
#if defined(__F16C__) && !(defined(__clang__) && __clang_major__ < 15)
  // (clang before 15 has no _Float16 on x86: the fuzzing build takes the software conversion, same bits.)
  // Hardware conversion (round to nearest even, NaN quieted with its payload kept): the same bits as
  // half.h's software conversion, and the compiler vectorizes it.
  static float load(Fp16 v) {
    _Float16 h;
    __builtin_memcpy(&h, &v.bits, 2);
    return static_cast<float>(h);
  }
  static Fp16 store(float v) {
    _Float16 h = static_cast<_Float16>(v);
    Fp16 out;
    __builtin_memcpy(&out.bits, &h, 2);
    return out;
  }
#else
  static float load(Fp16 v) { return fp16_to_float(v.bits); }
  static Fp16 store(float v) { return Fp16{float_to_fp16(v)}; }
#endif
};
template <>
struct Arith<Bf16> {
  using Wide = float;
  static float load(Bf16 v) { return bf16_to_float(v.bits); }
  static Bf16 store(float v) { return Bf16{float_to_bf16(v)}; }
};

// One loop per op so that each is a plain, vectorizable loop. dst may alias a or b exactly (element i is
// read before it is written), never partially.
template <typename T, bagua_redop_t Op>
void reduce_loop(T* dst, const T* a, const T* b, size_t count) {
  using A = Arith<T>;
  for (size_t i = 0; i < count; ++i) dst[i] = A::store(apply_op(A::load(a[i]), A::load(b[i]), Op));
}

#if defined(__AVX2__) && defined(__F16C__)
// fp16 by hand: the compiler does not vectorize _Float16 conversions without AVX512-FP16.
template <bagua_redop_t Op>
void reduce_loop_fp16(Fp16* dst, const Fp16* a, const Fp16* b, size_t count) {
  const __m256 qnan = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fc00000));
  size_t i = 0;
  for (; i + 8 <= count; i += 8) {
    __m256 x = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a + i)));
    __m256 y = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + i)));
    __m256 r, nan;
    if constexpr (Op == BAGUA_SUM) r = _mm256_add_ps(x, y);
    if constexpr (Op == BAGUA_PROD) r = _mm256_mul_ps(x, y);
    if constexpr (Op == BAGUA_MIN) r = _mm256_blendv_ps(x, y, _mm256_cmp_ps(y, x, _CMP_LT_OQ));
    if constexpr (Op == BAGUA_MAX) r = _mm256_blendv_ps(x, y, _mm256_cmp_ps(y, x, _CMP_GT_OQ));
    if constexpr (Op == BAGUA_MIN || Op == BAGUA_MAX)
      nan = _mm256_cmp_ps(x, y, _CMP_UNORD_Q);
    else
      nan = _mm256_cmp_ps(r, r, _CMP_UNORD_Q);
    r = _mm256_blendv_ps(r, qnan, nan);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), _mm256_cvtps_ph(r, _MM_FROUND_TO_NEAREST_INT));
  }
  using A = Arith<Fp16>;
  for (; i < count; ++i) dst[i] = A::store(apply_op(A::load(a[i]), A::load(b[i]), Op));
}

template <>
void reduce_loop<Fp16, BAGUA_SUM>(Fp16* dst, const Fp16* a, const Fp16* b, size_t count) {
  reduce_loop_fp16<BAGUA_SUM>(dst, a, b, count);
}
template <>
void reduce_loop<Fp16, BAGUA_PROD>(Fp16* dst, const Fp16* a, const Fp16* b, size_t count) {
  reduce_loop_fp16<BAGUA_PROD>(dst, a, b, count);
}
template <>
void reduce_loop<Fp16, BAGUA_MIN>(Fp16* dst, const Fp16* a, const Fp16* b, size_t count) {
  reduce_loop_fp16<BAGUA_MIN>(dst, a, b, count);
}
template <>
void reduce_loop<Fp16, BAGUA_MAX>(Fp16* dst, const Fp16* a, const Fp16* b, size_t count) {
  reduce_loop_fp16<BAGUA_MAX>(dst, a, b, count);
}
#endif

template <typename T>
void reduce_typed(T* dst, const T* a, const T* b, size_t count, bagua_redop_t op) {
  switch (op) {
    case BAGUA_SUM:
    case BAGUA_AVG: return reduce_loop<T, BAGUA_SUM>(dst, a, b, count);
    case BAGUA_PROD: return reduce_loop<T, BAGUA_PROD>(dst, a, b, count);
    case BAGUA_MIN: return reduce_loop<T, BAGUA_MIN>(dst, a, b, count);
    case BAGUA_MAX: return reduce_loop<T, BAGUA_MAX>(dst, a, b, count);
  }
}

template <typename T>
void divide_typed(T* dst, size_t count, int divisor) {
  using A = Arith<T>;
  using W = typename A::Wide;
  for (size_t i = 0; i < count; ++i) {
    dst[i] = A::store(divide_value<W>(A::load(dst[i]), divisor));  // the divisor is at most 2^20: no overflow
  }
}

template <typename F>
void dispatch(bagua_datatype_t dtype, F&& f) {
  switch (dtype) {
    case BAGUA_INT8: return f(int8_t{});
    case BAGUA_UINT8: return f(uint8_t{});
    case BAGUA_INT32: return f(int32_t{});
    case BAGUA_UINT32: return f(uint32_t{});
    case BAGUA_INT64: return f(int64_t{});
    case BAGUA_UINT64: return f(uint64_t{});
    case BAGUA_FLOAT16: return f(Fp16{});
    case BAGUA_BFLOAT16: return f(Bf16{});
    case BAGUA_FLOAT32: return f(float{});
    case BAGUA_FLOAT64: return f(double{});
  }
}

}  // namespace

void reduce_from(void* dst, const void* a, const void* b, size_t count, bagua_datatype_t dtype, bagua_redop_t op) {
  dispatch(dtype, [&](auto tag) {
    using T = decltype(tag);
    reduce_typed(static_cast<T*>(dst), static_cast<const T*>(a), static_cast<const T*>(b), count, op);
  });
}

void divide_by(void* dst, size_t count, bagua_datatype_t dtype, int divisor) {
  dispatch(dtype, [&](auto tag) {
    using T = decltype(tag);
    divide_typed(static_cast<T*>(dst), count, divisor);
  });
}

}  // namespace bagua::BAGUA_REDUCE_NAMESPACE

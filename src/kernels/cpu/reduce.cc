#include "kernels/cpu/reduce.h"

#include <cstdint>
#include <type_traits>

#include "kernels/half.h"

namespace bagua {

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
  static float load(Fp16 v) { return fp16_to_float(v.bits); }
  static Fp16 store(float v) { return Fp16{float_to_fp16(v)}; }
};
template <>
struct Arith<Bf16> {
  using Wide = float;
  static float load(Bf16 v) { return bf16_to_float(v.bits); }
  static Bf16 store(float v) { return Bf16{float_to_bf16(v)}; }
};

template <typename W>
W apply(W a, W b, bagua_redop_t op) {
  if constexpr (std::is_integral_v<W>) {
    // Wrapping arithmetic: compute in the unsigned type of the same width.
    using U = std::make_unsigned_t<W>;
    switch (op) {
      case BAGUA_SUM:
      case BAGUA_AVG: return static_cast<W>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
      case BAGUA_PROD: return static_cast<W>(static_cast<U>(static_cast<U>(a) * static_cast<U>(b)));
      case BAGUA_MIN: return b < a ? b : a;
      case BAGUA_MAX: return b > a ? b : a;
    }
  } else {
    switch (op) {
      case BAGUA_SUM:
      case BAGUA_AVG: return a + b;
      case BAGUA_PROD: return a * b;
      case BAGUA_MIN: return b < a ? b : a;  // a NaN in `a` is kept; a NaN in `b` is ignored
      case BAGUA_MAX: return b > a ? b : a;
    }
  }
  return a;
}

template <typename T>
void reduce_typed(T* dst, const T* a, const T* b, size_t count, bagua_redop_t op) {
  using A = Arith<T>;
  for (size_t i = 0; i < count; ++i) dst[i] = A::store(apply(A::load(a[i]), A::load(b[i]), op));
}

template <typename T>
void divide_typed(T* dst, size_t count, int divisor) {
  using A = Arith<T>;
  using W = typename A::Wide;
  for (size_t i = 0; i < count; ++i) {
    if constexpr (std::is_integral_v<W>) {
      // Signed division in C++ truncates toward zero; the divisor is at most 2^20, so no overflow.
      dst[i] = A::store(static_cast<W>(A::load(dst[i]) / static_cast<W>(divisor)));
    } else {
      dst[i] = A::store(A::load(dst[i]) / static_cast<W>(divisor));
    }
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

void reduce_into(void* dst, const void* src, size_t count, bagua_datatype_t dtype, bagua_redop_t op) {
  reduce_from(dst, dst, src, count, dtype, op);
}

void divide_by(void* dst, size_t count, bagua_datatype_t dtype, int divisor) {
  dispatch(dtype, [&](auto tag) {
    using T = decltype(tag);
    divide_typed(static_cast<T*>(dst), count, divisor);
  });
}

}  // namespace bagua

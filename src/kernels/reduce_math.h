// The reduction arithmetic (docs/architecture.md, "Semantics"), written once for the CPU loops and the CUDA kernels:
// integers wrap (computed unsigned); any floating NaN result is the canonical quiet NaN (which payload
// survives NaN + NaN depends on operand order, which compilers may swap); min and max propagate NaN from
// either side. avg is a sum here; the division happens after (divide_value).
#pragma once

#include <cstdint>
#include <type_traits>

#include "bagua/bagua.h"
#include "kernels/half.h"

namespace bagua {

template <typename W>
BAGUA_HD inline W canonical_nan() {
  if constexpr (std::is_same_v<W, double>) {
    uint64_t bits = 0x7ff8000000000000ull;
    double d;
    __builtin_memcpy(&d, &bits, 8);
    return d;
  } else {
    return bits_float(0x7fc00000u);
  }
}

template <typename W>
BAGUA_HD inline W apply_op(W a, W b, bagua_redop_t op) {
  if constexpr (std::is_integral_v<W>) {
    using U = std::make_unsigned_t<W>;
    switch (op) {
      case BAGUA_SUM:
      case BAGUA_AVG: return static_cast<W>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
      case BAGUA_PROD: return static_cast<W>(static_cast<U>(static_cast<U>(a) * static_cast<U>(b)));
      case BAGUA_MIN: return b < a ? b : a;
      case BAGUA_MAX: return b > a ? b : a;
    }
    return a;
  } else {
    W r;
    switch (op) {
      case BAGUA_SUM:
      case BAGUA_AVG: r = a + b; break;
      case BAGUA_PROD: r = a * b; break;
      case BAGUA_MIN: r = (a != a || b != b) ? canonical_nan<W>() : (b < a ? b : a); break;
      case BAGUA_MAX: r = (a != a || b != b) ? canonical_nan<W>() : (b > a ? b : a); break;
      default: r = a; break;
    }
    return r != r ? canonical_nan<W>() : r;
  }
}

// x / divisor: truncation toward zero for integers, one IEEE division for floats (canonical NaN). 8-bit integers
// divide as int: the divisor (a rank count, up to 2^20) need not fit their type.
template <typename W>
BAGUA_HD inline W divide_value(W x, int divisor) {
  if constexpr (std::is_integral_v<W> && sizeof(W) < 4) {
    return static_cast<W>(static_cast<int>(x) / divisor);
  } else if constexpr (std::is_integral_v<W>) {
    return static_cast<W>(x / static_cast<W>(divisor));
  } else {
    W q = x / static_cast<W>(divisor);
    return q != q ? canonical_nan<W>() : q;
  }
}

// Asynchronous averaging's correction of one element (float or double): x + (sum / n - snapshot), keeping the
// caller's updates since the snapshot; a NaN result is canonical.
template <typename W>
BAGUA_HD inline W average_correction(W x, W sum, W snapshot, int n) {
  W r = x + (sum / static_cast<W>(n) - snapshot);
  return r != r ? canonical_nan<W>() : r;
}

}  // namespace bagua

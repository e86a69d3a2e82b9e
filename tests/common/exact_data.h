// Inputs whose reductions are exact in every datatype (nccl-tests style), and the serial reference.
// Oracle: every partial sum or product is a small integer (|x| <= 64), exact in fp16 and bf16, so the result
// does not depend on the order of the reduction; avg divides the exact sum once, which the reference does
// the same way (truncation toward zero for integers, one IEEE division for floats, fp16/bf16 via fp32).
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "bagua/bagua.h"
#include "kernels/dtype.h"
#include "kernels/half.h"

namespace bagua::testing {

inline bool is_signed_type(bagua_datatype_t t) {
  return t == BAGUA_INT8 || t == BAGUA_INT32 || t == BAGUA_INT64 || t >= BAGUA_FLOAT16;
}

// Value of element i on rank r, as a small integer.
inline long long input_value(bagua_redop_t op, bagua_datatype_t t, int r, size_t i) {
  long long k = static_cast<long long>((i * 7 + static_cast<size_t>(r) * 3 + i / 13) % 5);
  if (op == BAGUA_PROD) return is_signed_type(t) ? (k == 0 ? -1 : (k % 2 ? 1 : 2)) : (k % 2 ? 1 : 2);
  return is_signed_type(t) ? k - 2 : k;
}

// Buffers may be misaligned on purpose (the collectives' tests shift them by a byte): store through memcpy.
inline void store_value(void* buf, size_t i, bagua_datatype_t t, double v) {
  auto put = [&](auto value) {
    std::memcpy(static_cast<unsigned char*>(buf) + i * sizeof(value), &value, sizeof(value));
  };
  switch (t) {
    case BAGUA_INT8: put(static_cast<int8_t>(v)); break;
    case BAGUA_UINT8: put(static_cast<uint8_t>(v)); break;
    case BAGUA_INT32: put(static_cast<int32_t>(v)); break;
    case BAGUA_UINT32: put(static_cast<uint32_t>(v)); break;
    case BAGUA_INT64: put(static_cast<int64_t>(v)); break;
    case BAGUA_UINT64: put(static_cast<uint64_t>(v)); break;
    case BAGUA_FLOAT16: put(float_to_fp16(static_cast<float>(v))); break;
    case BAGUA_BFLOAT16: put(float_to_bf16(static_cast<float>(v))); break;
    case BAGUA_FLOAT32: put(static_cast<float>(v)); break;
    case BAGUA_FLOAT64: put(v); break;
  }
}

inline void fill_input(void* buf, size_t count, bagua_datatype_t t, bagua_redop_t op, int rank) {
  for (size_t i = 0; i < count; ++i) store_value(buf, i, t, static_cast<double>(input_value(op, t, rank, i)));
}

// The expected element i, written into `out` (one element of type t).
inline void expected_value(void* out, size_t i, bagua_datatype_t t, bagua_redop_t op, int nranks) {
  long long acc = input_value(op, t, 0, i);
  for (int r = 1; r < nranks; ++r) {
    long long v = input_value(op, t, r, i);
    switch (op) {
      case BAGUA_SUM:
      case BAGUA_AVG: acc += v; break;
      case BAGUA_PROD: acc *= v; break;
      case BAGUA_MIN: acc = v < acc ? v : acc; break;
      case BAGUA_MAX: acc = v > acc ? v : acc; break;
    }
  }
  if (op != BAGUA_AVG) return store_value(out, 0, t, static_cast<double>(acc));
  switch (t) {
    case BAGUA_FLOAT16:
      static_cast<uint16_t*>(out)[0] = float_to_fp16(static_cast<float>(acc) / static_cast<float>(nranks));
      break;
    case BAGUA_BFLOAT16:
      static_cast<uint16_t*>(out)[0] = float_to_bf16(static_cast<float>(acc) / static_cast<float>(nranks));
      break;
    case BAGUA_FLOAT32: static_cast<float*>(out)[0] = static_cast<float>(acc) / static_cast<float>(nranks); break;
    case BAGUA_FLOAT64: static_cast<double*>(out)[0] = static_cast<double>(acc) / nranks; break;
    default: store_value(out, 0, t, static_cast<double>(acc / nranks)); break;  // C++ / truncates toward zero
  }
}

// Index of the first element that differs bitwise from the reference, or count when all match.
inline size_t first_mismatch(const void* buf, size_t count, bagua_datatype_t t, bagua_redop_t op, int nranks) {
  size_t size = datatype_size(t);
  unsigned char want[8];
  for (size_t i = 0; i < count; ++i) {
    expected_value(want, i, t, op, nranks);
    if (std::memcmp(static_cast<const unsigned char*>(buf) + i * size, want, size) != 0) return i;
  }
  return count;
}

inline uint64_t fnv1a(const void* data, size_t bytes) {
  uint64_t h = 14695981039346656037ull;
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < bytes; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

}  // namespace bagua::testing

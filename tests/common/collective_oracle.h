// Inputs and expected outputs for every collective, exact in every datatype (see exact_data.h for the
// reduction oracle). Non-reducing collectives move small integer codes that identify sender, receiver and
// position, so a block delivered to the wrong place is caught.
#pragma once

#include <cstring>
#include <vector>

#include "common/exact_data.h"

namespace bagua::testing {

// A code in [-5, 5] (signed types) or [0, 10] (unsigned) from (a, b, i).
inline double code_value(bagua_datatype_t t, int a, int b, size_t i) {
  long long k = static_cast<long long>((static_cast<size_t>(a) * 7 + static_cast<size_t>(b) * 3 + i + i / 11) % 11);
  return static_cast<double>(is_signed_type(t) ? k - 5 : k);
}

inline void fill_codes(void* buf, size_t count, bagua_datatype_t t, int a, int b) {
  for (size_t i = 0; i < count; ++i) store_value(buf, i, t, code_value(t, a, b, i));
}

// First index where buf differs from the codes (a, b, .), or count.
inline size_t first_code_mismatch(const void* buf, size_t count, bagua_datatype_t t, int a, int b) {
  size_t size = datatype_size(t);
  unsigned char want[8];
  for (size_t i = 0; i < count; ++i) {
    store_value(want, 0, t, code_value(t, a, b, i));
    if (std::memcmp(static_cast<const unsigned char*>(buf) + i * size, want, size) != 0) return i;
  }
  return count;
}

// Reduction oracle shifted by `offset` elements: element i of this buffer is global element offset + i.
inline void fill_input_at(void* buf, size_t count, size_t offset, bagua_datatype_t t, bagua_redop_t op, int rank) {
  for (size_t i = 0; i < count; ++i) store_value(buf, i, t, static_cast<double>(input_value(op, t, rank, offset + i)));
}
inline size_t first_mismatch_at(const void* buf, size_t count, size_t offset, bagua_datatype_t t, bagua_redop_t op,
                                int nranks) {
  size_t size = datatype_size(t);
  unsigned char want[8];
  for (size_t i = 0; i < count; ++i) {
    expected_value(want, offset + i, t, op, nranks);
    if (std::memcmp(static_cast<const unsigned char*>(buf) + i * size, want, size) != 0) return i;
  }
  return count;
}

// alltoallv: how many elements rank `from` sends to rank `to` (some zero), for a base count.
inline size_t alltoallv_count(int from, int to, size_t base) {
  return ((static_cast<size_t>(from) * 3 + static_cast<size_t>(to)) % 4) * base / 2;
}

}  // namespace bagua::testing

namespace bagua::testing {

// How many elements differ (for perf tools' #wrong column).
inline size_t wrong_reduced(const void* buf, size_t count, size_t offset, bagua_datatype_t t, bagua_redop_t op,
                            int nranks) {
  size_t size = datatype_size(t), wrong = 0;
  unsigned char want[8];
  for (size_t i = 0; i < count; ++i) {
    expected_value(want, offset + i, t, op, nranks);
    wrong += std::memcmp(static_cast<const unsigned char*>(buf) + i * size, want, size) != 0;
  }
  return wrong;
}

inline size_t wrong_codes(const void* buf, size_t count, bagua_datatype_t t, int a, int b) {
  size_t size = datatype_size(t), wrong = 0;
  unsigned char want[8];
  for (size_t i = 0; i < count; ++i) {
    store_value(want, 0, t, code_value(t, a, b, i));
    wrong += std::memcmp(static_cast<const unsigned char*>(buf) + i * size, want, size) != 0;
  }
  return wrong;
}

}  // namespace bagua::testing

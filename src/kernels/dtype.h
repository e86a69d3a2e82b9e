// Datatype and reduction-op facts shared by every layer.
#pragma once

#include <cstddef>

#include "bagua/bagua.h"

namespace bagua {

constexpr int kNumDatatypes = 10;
constexpr int kNumRedops = 5;

inline bool valid_datatype(int dtype) { return dtype >= 0 && dtype < kNumDatatypes; }
inline bool valid_redop(int op) { return op >= 0 && op < kNumRedops; }

size_t datatype_size(bagua_datatype_t dtype);
const char* datatype_name(bagua_datatype_t dtype);  // "float32"
const char* redop_name(bagua_redop_t op);           // "sum"

}  // namespace bagua

#include "kernels/dtype.h"

namespace bagua {

size_t datatype_size(bagua_datatype_t dtype) {
  switch (dtype) {
    case BAGUA_INT8:
    case BAGUA_UINT8: return 1;
    case BAGUA_FLOAT16:
    case BAGUA_BFLOAT16: return 2;
    case BAGUA_INT32:
    case BAGUA_UINT32:
    case BAGUA_FLOAT32: return 4;
    case BAGUA_INT64:
    case BAGUA_UINT64:
    case BAGUA_FLOAT64: return 8;
  }
  return 0;
}

const char* datatype_name(bagua_datatype_t dtype) {
  static const char* const kNames[kNumDatatypes] = {"int8",   "uint8",   "int32",    "uint32",  "int64",
                                                    "uint64", "float16", "bfloat16", "float32", "float64"};
  return valid_datatype(dtype) ? kNames[dtype] : "invalid";
}

const char* redop_name(bagua_redop_t op) {
  static const char* const kNames[kNumRedops] = {"sum", "prod", "min", "max", "avg"};
  return valid_redop(op) ? kNames[op] : "invalid";
}

}  // namespace bagua

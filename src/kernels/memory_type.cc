#include "kernels/memory_type.h"

namespace bagua {

const char* memory_type_name(MemoryType type) {
  switch (type) {
    case MemoryType::kHost: return "host";
    case MemoryType::kDevice: return "CUDA device";
    case MemoryType::kManaged: return "CUDA managed";
  }
  return "unknown";
}

}  // namespace bagua

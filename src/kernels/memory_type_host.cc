// Memory-type detection for builds without CUDA: every pointer is host memory.
#include "kernels/memory_type.h"

namespace bagua {

MemoryType detect_memory_type(const void*) { return MemoryType::kHost; }
bool cuda_built() { return false; }
int cuda_device_count() { return 0; }

}  // namespace bagua

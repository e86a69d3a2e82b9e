// Memory-type detection with the CUDA runtime. Without a driver or device every pointer is host memory.
#include <cuda_runtime_api.h>

#include "kernels/memory_type.h"

namespace bagua {

MemoryType detect_memory_type(const void* ptr) {
  if (ptr == nullptr) return MemoryType::kHost;
  cudaPointerAttributes attrs{};
  cudaError_t err = cudaPointerGetAttributes(&attrs, ptr);
  if (err != cudaSuccess) {
    cudaGetLastError();  // clear the sticky-free error so later CUDA calls are not confused
    return MemoryType::kHost;
  }
  switch (attrs.type) {
    case cudaMemoryTypeDevice: return MemoryType::kDevice;
    case cudaMemoryTypeManaged: return MemoryType::kManaged;
    default: return MemoryType::kHost;  // unregistered or pinned host memory
  }
}

bool cuda_built() { return true; }

int cuda_device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return count;
}

}  // namespace bagua

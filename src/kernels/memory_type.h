// Where a buffer lives, detected per pointer (cudaPointerGetAttributes when built with CUDA).
#pragma once

namespace bagua {

enum class MemoryType { kHost, kDevice, kManaged };

MemoryType detect_memory_type(const void* ptr);
const char* memory_type_name(MemoryType type);
bool cuda_built();        // true when this library was compiled with CUDA support
int cuda_device_count();  // 0 without CUDA, without a driver, or without a device

}  // namespace bagua

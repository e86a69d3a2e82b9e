// A build without CUDA: no CUDA runtime, every pointer is host memory (unless the stand-in is in use).
#include "kernels/device_runtime.h"

namespace bagua {

DeviceRuntime* cuda_device_runtime() { return nullptr; }
bool cuda_built() { return false; }
int cuda_device_count() { return 0; }

}  // namespace bagua

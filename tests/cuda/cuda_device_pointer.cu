// Device memory is detected per pointer and refused with BAGUA_ERR_NOT_SUPPORTED (and a message) until the
// device path is implemented. Exits 77 (skip) where there is no CUDA device.
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstring>

#include "bagua/bagua.h"

int main() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("no CUDA device: skipped\n");
    return 77;
  }
  bagua_unique_id_t id;
  bagua_comm_t comm = nullptr;
  if (bagua_get_unique_id(&id) != BAGUA_SUCCESS || bagua_comm_init_rank(&comm, 1, id, 0) != BAGUA_SUCCESS) return 1;
  float* device = nullptr;
  if (cudaMalloc(&device, 1024 * sizeof(float)) != cudaSuccess) return 1;
  float host[4] = {1, 2, 3, 4};
  int failures = 0;
  bagua_status_t s = bagua_allreduce(device, device, 1024, BAGUA_FLOAT32, BAGUA_SUM, comm, nullptr);
  if (s != BAGUA_ERR_NOT_SUPPORTED || !std::strstr(bagua_get_last_error(comm), "CUDA device")) ++failures;
  std::printf("allreduce on device memory: %s: %s\n", bagua_status_string(s), bagua_get_last_error(comm));
  if (bagua_send(device, 4, BAGUA_FLOAT32, 0, comm, nullptr) != BAGUA_ERR_NOT_SUPPORTED) ++failures;
  // Host memory still works afterwards: NOT_SUPPORTED has no side effect.
  if (bagua_allreduce(host, host, 4, BAGUA_FLOAT32, BAGUA_SUM, comm, nullptr) != BAGUA_SUCCESS) ++failures;
  cudaFree(device);
  bagua_comm_destroy(comm);
  std::printf("%s\n", failures ? "FAILED" : "ok");
  return failures ? 1 : 0;
}

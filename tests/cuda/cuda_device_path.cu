// What only a real GPU can check of the device path (docs/cuda.md); the protocol itself is tested on the host
// stand-in by tests/mp/mp_device.cc and mp_collectives. Two ranks are threads of this process, sharing device 0,
// each with its own stream:
//   - cudaMallocAsync and managed memory (staged like any device memory);
//   - a capture of the call's stream is refused with NOT_SUPPORTED, and the capture stays valid;
//   - while a call is in flight (the peer joins late): a user's global-mode capture of another stream works, and
//     a user kernel launched for the first time completes (CUDA's default lazy module loading);
//   - a device buffer passed with a host buffer is INVALID_ARGUMENT.
// Exits 77 (skip) where there is no CUDA device.
#include <cuda_runtime_api.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

#include "bagua/bagua.h"

namespace {

std::atomic<int> g_failures{0};

#define CHECK(cond)                                                                 \
  do {                                                                              \
    if (!(cond)) {                                                                  \
      std::fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
      ++g_failures;                                                                 \
    }                                                                               \
  } while (0)
#define CUDA_OK(call) CHECK((call) == cudaSuccess)

__global__ void first_launch_kernel(int* out) { *out = 42; }
__global__ void captured_kernel(float* x) { x[threadIdx.x] += 1.0f; }

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Fills n floats with value, allreduces (sum over 2 ranks) on stream, and checks 2 * value.
void allreduce_and_check(float* buf, size_t n, float value, bagua_comm_t comm, cudaStream_t stream, const char* what) {
  std::vector<float> host(n, value);
  CUDA_OK(cudaMemcpyAsync(buf, host.data(), n * sizeof(float), cudaMemcpyHostToDevice, stream));
  bagua_status_t s = bagua_allreduce(buf, buf, n, BAGUA_FLOAT32, BAGUA_SUM, comm, stream);
  if (s != BAGUA_SUCCESS) std::fprintf(stderr, "%s: %s\n", what, bagua_get_last_error(comm));
  CHECK(s == BAGUA_SUCCESS);
  CUDA_OK(cudaMemcpyAsync(host.data(), buf, n * sizeof(float), cudaMemcpyDeviceToHost, stream));
  CUDA_OK(cudaStreamSynchronize(stream));
  size_t wrong = 0;
  for (float v : host) wrong += v != 2 * value;
  if (wrong) std::fprintf(stderr, "%s: %zu wrong elements\n", what, wrong);
  CHECK(wrong == 0);
}

void rank_main(int rank, bagua_unique_id_t id, std::atomic<int>* step) {
  bagua_comm_t comm = nullptr;
  CHECK(bagua_comm_init_rank(&comm, 2, id, rank) == BAGUA_SUCCESS);
  cudaStream_t stream;
  CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const size_t n = 1 << 20;

  float* pooled = nullptr;
  CUDA_OK(cudaMallocAsync(reinterpret_cast<void**>(&pooled), n * sizeof(float), stream));
  allreduce_and_check(pooled, n, 1.5f + rank * 0, comm, stream, "cudaMallocAsync buffer");
  CUDA_OK(cudaFreeAsync(pooled, stream));

  float* managed = nullptr;
  CUDA_OK(cudaMallocManaged(reinterpret_cast<void**>(&managed), n * sizeof(float)));
  allreduce_and_check(managed, n, 3.0f, comm, stream, "managed buffer");
  CUDA_OK(cudaFree(managed));

  float* buf = nullptr;
  CUDA_OK(cudaMalloc(reinterpret_cast<void**>(&buf), n * sizeof(float)));
  std::vector<float> host(16);
  CHECK(bagua_allreduce(buf, host.data(), 16, BAGUA_FLOAT32, BAGUA_SUM, comm, stream) == BAGUA_ERR_INVALID_ARGUMENT);

  // Rank 0 alone: capture its own stream (the other rank makes no CUDA call meanwhile).
  if (rank == 0) {
    CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
    bagua_status_t s = bagua_allreduce(buf, buf, n, BAGUA_FLOAT32, BAGUA_SUM, comm, stream);
    CHECK(s == BAGUA_ERR_NOT_SUPPORTED && std::strstr(bagua_get_last_error(comm), "CUDA graph") != nullptr);
    cudaGraph_t graph = nullptr;
    CUDA_OK(cudaStreamEndCapture(stream, &graph));
    if (graph) cudaGraphDestroy(graph);
    step->store(1);
  } else {
    while (step->load() < 1) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  allreduce_and_check(buf, n, 2.0f, comm, stream, "after the refused capture");

  // A call in flight: rank 1 joins 500 ms late.
  std::vector<float> ones(n, 1.0f);
  CUDA_OK(cudaMemcpyAsync(buf, ones.data(), n * sizeof(float), cudaMemcpyHostToDevice, stream));
  CUDA_OK(cudaStreamSynchronize(stream));
  if (rank == 1) std::this_thread::sleep_for(std::chrono::milliseconds(500));
  CHECK(bagua_allreduce(buf, buf, n, BAGUA_FLOAT32, BAGUA_SUM, comm, stream) == BAGUA_SUCCESS);
  if (rank == 0) {
    cudaStream_t other;
    CUDA_OK(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking));
    // A first launch of a kernel of this program (lazy module loading) while the call is in flight.
    int* flag = nullptr;
    CUDA_OK(cudaMalloc(reinterpret_cast<void**>(&flag), sizeof(int)));
    auto start = Clock::now();
    first_launch_kernel<<<1, 1, 0, other>>>(flag);
    CUDA_OK(cudaStreamSynchronize(other));
    double took = since(start);
    int value = 0;
    CUDA_OK(cudaMemcpy(&value, flag, sizeof(int), cudaMemcpyDeviceToHost));
    std::printf("first launch of a user kernel during a call: %.1f ms\n", took * 1e3);
    CHECK(value == 42 && took < 0.4);
    // A global-mode capture of another stream while the call is in flight.
    float* x = nullptr;
    CUDA_OK(cudaMalloc(reinterpret_cast<void**>(&x), 32 * sizeof(float)));
    CUDA_OK(cudaStreamBeginCapture(other, cudaStreamCaptureModeGlobal));
    captured_kernel<<<1, 32, 0, other>>>(x);
    cudaGraph_t graph = nullptr;
    CUDA_OK(cudaStreamEndCapture(other, &graph));
    cudaGraphExec_t exec = nullptr;
    CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
    CUDA_OK(cudaGraphLaunch(exec, other));
    CUDA_OK(cudaStreamSynchronize(other));
    std::printf("global-mode capture of another stream during a call: ok\n");
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    cudaFree(x);
    cudaFree(flag);
    cudaStreamDestroy(other);
  }
  std::vector<float> out(n);
  CUDA_OK(cudaMemcpyAsync(out.data(), buf, n * sizeof(float), cudaMemcpyDeviceToHost, stream));
  CUDA_OK(cudaStreamSynchronize(stream));
  size_t wrong = 0;
  for (float v : out) wrong += v != 2.0f;
  CHECK(wrong == 0);
  cudaFree(buf);
  cudaStreamDestroy(stream);
  CHECK(bagua_comm_destroy(comm) == BAGUA_SUCCESS);
}

}  // namespace

int main() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("no CUDA device: skipped\n");
    return 77;
  }
  bagua_unique_id_t id;
  if (bagua_get_unique_id(&id) != BAGUA_SUCCESS) return 1;
  std::atomic<int> step{0};
  std::thread r0(rank_main, 0, id, &step), r1(rank_main, 1, id, &step);
  r0.join();
  r1.join();
  std::printf("%s\n", g_failures.load() ? "FAILED" : "cuda device path: ok");
  return g_failures.load() ? 1 : 0;
}

// A SIMT emulator that runs the library's CUDA kernels (src/kernels/cuda) on the CPU, so that CI, which has no GPU,
// checks their logic bit for bit against the CPU reference: thread layouts, shuffles, votes, barriers, the aligned
// and unaligned access paths, tails. Include it instead of nvcc's runtime, before anything else, in a .cc file that
// then includes a .cu file.
//
// Every thread of a block is a fiber on the calling OS thread (x86-64), and blocks run one after another. A warp's
// shuffle or vote waits until all 32 lanes reach one; __syncthreads waits for every thread of the block that has not
// exited. A barrier that can never complete (a divergent __syncthreads, a shuffle that some lane never reaches or
// has exited from) aborts with the threads' states. Device memory is host memory, streams are ignored (a launch
// runs to completion), and kernel launches check nothing about resources. What it cannot check: the GPU's own
// arithmetic and NaN rules, speed, and races that barrier order does not expose.
#pragma once

// Before the CUDA headers, which keep these when defined: shared variables are one per kernel (blocks run in turn).
#define __shared__ static
#define __launch_bounds__(...)

#include <cuda_runtime_api.h>
#include <vector_functions.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <type_traits>

using std::isfinite;
using std::isnan;

namespace simt {

const dim3& thread_index();
const dim3& block_index();
const dim3& block_dim();
const dim3& grid_dim();
void* dynamic_shared();
unsigned lane_id();
// Runs body once per thread of every block.
void launch(dim3 grid, dim3 block, size_t shared_bytes, const std::function<void()>& body);
void block_sync();
// The value that lane src of the calling warp passed (all 32 lanes take part).
uint64_t exchange(unsigned mask, uint64_t bits, unsigned src);
bool any(unsigned mask, bool predicate);

template <typename T>
T shuffle(unsigned mask, T value, unsigned src) {
  static_assert(sizeof(T) <= 8 && std::is_trivially_copyable_v<T>);
  uint64_t bits = 0;
  std::memcpy(&bits, &value, sizeof(T));
  bits = exchange(mask, bits, src);
  std::memcpy(&value, &bits, sizeof(T));
  return value;
}

}  // namespace simt

template <typename T>
T __shfl_xor_sync(unsigned mask, T value, int lane_mask) {
  return simt::shuffle(mask, value, simt::lane_id() ^ static_cast<unsigned>(lane_mask));
}
template <typename T>
T __shfl_sync(unsigned mask, T value, int src) {
  return simt::shuffle(mask, value, static_cast<unsigned>(src));
}
inline int __any_sync(unsigned mask, int predicate) { return simt::any(mask, predicate != 0) ? 1 : 0; }
inline float __int_as_float(int bits) {
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}
// The typed overload of nvcc's cuda_runtime.h.
template <typename T>
cudaError_t cudaMalloc(T** ptr, size_t bytes) {
  return cudaMalloc(reinterpret_cast<void**>(ptr), bytes);
}
// nvcc's runtime has this overload for kernels; loading is a no-op here.
template <typename T>
cudaError_t cudaFuncGetAttributes(cudaFuncAttributes* attributes, T*) {
  *attributes = cudaFuncAttributes{};
  return cudaSuccess;
}

#define threadIdx (::simt::thread_index())
#define blockIdx (::simt::block_index())
#define blockDim (::simt::block_dim())
#define gridDim (::simt::grid_dim())
#define __syncthreads() ::simt::block_sync()
#define BAGUA_LAUNCH(kernel, grid, block, shared_bytes, stream, ...)               \
  do {                                                                             \
    (void)(stream);                                                                \
    ::simt::launch((grid), (block), (shared_bytes), [&] { kernel(__VA_ARGS__); }); \
  } while (0)
#define BAGUA_DYNAMIC_SHARED(type, name) type* name = static_cast<type*>(::simt::dynamic_shared())

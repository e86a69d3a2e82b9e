// CUDA reductions for every datatype and op: the CPU reference's rules (wrapping integers, fp16/bf16 through
// fp32 rounded once, canonical NaN results), one thread per element; and the library's copies by kernel.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "base/error.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/launch.h"
#include "kernels/dtype.h"
#include "kernels/half.h"
#include "kernels/reduce_math.h"

namespace bagua::cuda {

namespace {

struct Fp16 {
  uint16_t bits;
};
struct Bf16 {
  uint16_t bits;
};

template <typename T>
struct Arith {
  using Wide = T;
  __device__ static Wide load(T v) { return v; }
  __device__ static T store(Wide v) { return v; }
};
template <>
struct Arith<Fp16> {
  using Wide = float;
  __device__ static float load(Fp16 v) { return fp16_to_float(v.bits); }
  __device__ static Fp16 store(float v) { return Fp16{float_to_fp16(v)}; }
};
template <>
struct Arith<Bf16> {
  using Wide = float;
  __device__ static float load(Bf16 v) { return bf16_to_float(v.bits); }
  __device__ static Bf16 store(float v) { return Bf16{float_to_bf16(v)}; }
};

template <typename T>
__global__ void reduce_kernel(T* dst, const T* a, const T* b, size_t count, bagua_redop_t op) {
  using A = Arith<T>;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<size_t>(gridDim.x) * blockDim.x)
    dst[i] = A::store(apply_op(A::load(a[i]), A::load(b[i]), op));
}

template <typename T>
__global__ void divide_kernel(T* dst, size_t count, int divisor) {
  using A = Arith<T>;
  using W = typename A::Wide;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    dst[i] = A::store(divide_value<W>(A::load(dst[i]), divisor));
  }
}

// Up to kMaxReduceSpans sources and destinations of one kernel (kernel parameters, no device array).
template <typename Src, typename Dst>
struct SpanBatch {
  Src src[kMaxReduceSpans];
  Dst dst[kMaxReduceSpans];
  int nsrc, ndst;
};
using SpanPointers = SpanBatch<const void*, void*>;
using LateSpanPointers = SpanBatch<LateSpan, LateSpan>;

// A reduction of any number of spans as batches of kMaxReduceSpans sources, accumulated in dsts[0]: the last batch
// writes the first kMaxReduceSpans destinations (the caller copies dsts[0] into the others). launch(batch, last).
template <typename Src, typename Dst, typename Launch>
void for_each_batch(const Dst* dsts, int ndst, const Src* srcs, int nsrc, Launch&& launch) {
  int done = 0;
  for (;;) {
    SpanBatch<Src, Dst> p{};
    p.nsrc = 0;
    if (done > 0) p.src[p.nsrc++] = dsts[0];
    while (p.nsrc < kMaxReduceSpans && done < nsrc) p.src[p.nsrc++] = srcs[done++];
    const bool last = done == nsrc;
    p.ndst = last ? std::min(ndst, kMaxReduceSpans) : 1;
    for (int d = 0; d < p.ndst; ++d) p.dst[d] = dsts[d];
    launch(p, last);
    if (last) break;
  }
}

// Every destination = (src0 op src1 op ...) / divisor: the pairwise kernels' order and rounding (fp16/bf16 rounded
// after each step), in one pass. Each element is read from every source before it is written anywhere.
template <typename T>
__global__ void reduce_spans_kernel(const __grid_constant__ SpanPointers p, size_t count, bagua_redop_t op,
                                    int divisor) {
  using A = Arith<T>;
  using W = typename A::Wide;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const T first = static_cast<const T*>(p.src[0])[i];
    T out = first;  // one source, no division: a copy, bits kept (fp16/bf16 NaN payloads too)
    if (p.nsrc > 1 || divisor) {
      W acc = A::load(first);
      for (int k = 1; k < p.nsrc; ++k)
        acc = A::load(A::store(apply_op(acc, A::load(static_cast<const T*>(p.src[k])[i]), op)));
      out = A::store(divisor ? divide_value<W>(acc, divisor) : acc);
    }
    for (int d = 0; d < p.ndst; ++d) static_cast<T*>(p.dst[d])[i] = out;
  }
}

// Bytes copied by the multiprocessors, in words of W where source and destination share W's alignment: bytes
// before the first aligned word and after the last go one by one.
template <typename W>
__device__ void copy_words(uint8_t* dst, const uint8_t* src, size_t bytes, size_t head, size_t words) {
  const size_t first = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  const W* from = reinterpret_cast<const W*>(src + head);
  W* to = reinterpret_cast<W*>(dst + head);
  for (size_t i = first; i < words; i += stride) to[i] = from[i];
  for (size_t i = first; i < head; i += stride) dst[i] = src[i];
  for (size_t i = head + words * sizeof(W) + first; i < bytes; i += stride) dst[i] = src[i];
}

template <typename W>
__global__ void copy_kernel(uint8_t* dst, const uint8_t* src, size_t bytes, size_t head, size_t words) {
  copy_words<W>(dst, src, bytes, head, words);
}

// The addresses of spans a[0..na) then b[0..nb), read once per block by its first thread from the host's words into
// shared memory; false when a word is 0.
__device__ bool resolve_late(const LateSpan* a, int na, const LateSpan* b, int nb, uint8_t** out) {
  __shared__ int missing;
  if (threadIdx.x == 0) {
    missing = 0;
    for (int k = 0; k < na + nb; ++k) {
      const LateSpan& span = k < na ? a[k] : b[k - na];
      const uint64_t base = *static_cast<const volatile uint64_t*>(span.base);
      missing |= base == 0;
      out[k] = reinterpret_cast<uint8_t*>(base + span.offset);
    }
  }
  __syncthreads();
  return missing == 0;
}

__global__ void late_copy_kernel(const __grid_constant__ LateSpan dst, const __grid_constant__ LateSpan src,
                                 size_t bytes) {
  __shared__ uint8_t* at[2];
  if (!resolve_late(&dst, 1, &src, 1, at)) return;
  // The copy_bytes word choice, made here: the addresses were unknown at the launch.
  const auto skew = reinterpret_cast<uintptr_t>(at[0]) ^ reinterpret_cast<uintptr_t>(at[1]);
  auto run = [&](auto word) {
    using W = decltype(word);
    const size_t align = (sizeof(W) - reinterpret_cast<uintptr_t>(at[0]) % sizeof(W)) % sizeof(W);
    const size_t head = bytes < align ? bytes : align;
    copy_words<W>(at[0], at[1], bytes, head, (bytes - head) / sizeof(W));
  };
  if (skew % 16 == 0)
    run(uint4{});
  else if (skew % 4 == 0)
    run(uint32_t{});
  else
    run(uint8_t{});
}

template <typename T>
__global__ void late_reduce_spans_kernel(const __grid_constant__ LateSpanPointers p, size_t count, bagua_redop_t op,
                                         int divisor) {
  __shared__ uint8_t* at[2 * kMaxReduceSpans];
  if (!resolve_late(p.src, p.nsrc, p.dst, p.ndst, at)) return;
  using A = Arith<T>;
  using W = typename A::Wide;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const T first = reinterpret_cast<const T*>(at[0])[i];
    T out = first;  // (as reduce_spans_kernel)
    if (p.nsrc > 1 || divisor) {
      W acc = A::load(first);
      for (int k = 1; k < p.nsrc; ++k)
        acc = A::load(A::store(apply_op(acc, A::load(reinterpret_cast<const T*>(at[k])[i]), op)));
      out = A::store(divisor ? divide_value<W>(acc, divisor) : acc);
    }
    for (int d = 0; d < p.ndst; ++d) reinterpret_cast<T*>(at[p.nsrc + d])[i] = out;
  }
}

template <typename F>
void dispatch(bagua_datatype_t dtype, F&& f) {
  switch (dtype) {
    case BAGUA_INT8: return f(int8_t{});
    case BAGUA_UINT8: return f(uint8_t{});
    case BAGUA_INT32: return f(int32_t{});
    case BAGUA_UINT32: return f(uint32_t{});
    case BAGUA_INT64: return f(int64_t{});
    case BAGUA_UINT64: return f(uint64_t{});
    case BAGUA_FLOAT16: return f(Fp16{});
    case BAGUA_BFLOAT16: return f(Bf16{});
    case BAGUA_FLOAT32: return f(float{});
    case BAGUA_FLOAT64: return f(double{});
  }
}

unsigned blocks_for(size_t count) {
  size_t blocks = (count + 255) / 256;
  return static_cast<unsigned>(blocks < 65535 ? (blocks ? blocks : 1) : 65535);
}

void check_launch(const char* what) {
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) fail(BAGUA_ERR_CUDA, "{}: {}", what, cudaGetErrorString(err));
}

}  // namespace

void copy_bytes(void* dst, const void* src, size_t bytes, void* stream) {
  if (bytes == 0) return;
  auto* d = static_cast<uint8_t*>(dst);
  auto* s = static_cast<const uint8_t*>(src);
  const auto skew = reinterpret_cast<uintptr_t>(d) ^ reinterpret_cast<uintptr_t>(s);
  auto launch = [&](auto word) {
    using W = decltype(word);
    const size_t head = std::min(bytes, (sizeof(W) - reinterpret_cast<uintptr_t>(d) % sizeof(W)) % sizeof(W));
    const size_t words = (bytes - head) / sizeof(W);
    // Enough blocks to keep many loads in flight over PCIe, at most 1024.
    const size_t blocks = std::min<size_t>(1024, std::max<size_t>(1, (std::max(words, head) + 255) / 256));
    BAGUA_LAUNCH(copy_kernel<W>, static_cast<unsigned>(blocks), 256, 0, static_cast<cudaStream_t>(stream), d, s, bytes,
                 head, words);
  };
  if (skew % 16 == 0)
    launch(uint4{});
  else if (skew % 4 == 0)
    launch(uint32_t{});
  else
    launch(uint8_t{});
  check_launch("CUDA copy");
}

void reduce_from(void* dst, const void* a, const void* b, size_t count, bagua_datatype_t dtype, bagua_redop_t op,
                 void* stream) {
  if (count == 0) return;
  dispatch(dtype, [&](auto tag) {
    using T = decltype(tag);
    BAGUA_LAUNCH(reduce_kernel<T>, blocks_for(count), 256, 0, static_cast<cudaStream_t>(stream), static_cast<T*>(dst),
                 static_cast<const T*>(a), static_cast<const T*>(b), count, op);
  });
  check_launch("CUDA reduction");
}

void divide_by(void* dst, size_t count, bagua_datatype_t dtype, int divisor, void* stream) {
  if (count == 0) return;
  dispatch(dtype, [&](auto tag) {
    using T = decltype(tag);
    BAGUA_LAUNCH(divide_kernel<T>, blocks_for(count), 256, 0, static_cast<cudaStream_t>(stream), static_cast<T*>(dst),
                 count, divisor);
  });
  check_launch("CUDA average");
}

void reduce_spans(void* const* dsts, int ndst, const void* const* srcs, int nsrc, size_t count, bagua_datatype_t dtype,
                  bagua_redop_t op, int divisor, void* stream) {
  if (nsrc < 1 || ndst < 1) fail(BAGUA_ERR_INVALID_ARGUMENT, "a reduction of {} spans into {}", nsrc, ndst);
  if (count == 0) return;
  for_each_batch(dsts, ndst, srcs, nsrc, [&](const SpanPointers& p, bool last) {
    dispatch(dtype, [&](auto tag) {
      using T = decltype(tag);
      BAGUA_LAUNCH(reduce_spans_kernel<T>, blocks_for(count), 256, 0, static_cast<cudaStream_t>(stream), p, count, op,
                   last ? divisor : 0);
    });
    check_launch("CUDA reduction of spans");
  });
  for (int d = kMaxReduceSpans; d < ndst; ++d) copy_bytes(dsts[d], dsts[0], count * datatype_size(dtype), stream);
}

namespace {
// Late kernels resolve their addresses once per block: a bounded grid keeps those reads of host memory few.
unsigned late_blocks_for(size_t units) { return std::min(blocks_for(units), 1024u); }
}  // namespace

void late_copy_bytes(LateSpan dst, LateSpan src, size_t bytes, void* stream) {
  if (bytes == 0) return;
  BAGUA_LAUNCH(late_copy_kernel, late_blocks_for((bytes + 15) / 16), 256, 0, static_cast<cudaStream_t>(stream), dst,
               src, bytes);
  check_launch("CUDA copy of late spans");
}

void late_reduce_spans(const LateSpan* dsts, int ndst, const LateSpan* srcs, int nsrc, size_t count,
                       bagua_datatype_t dtype, bagua_redop_t op, int divisor, void* stream) {
  if (nsrc < 1 || ndst < 1) fail(BAGUA_ERR_INVALID_ARGUMENT, "a reduction of {} spans into {}", nsrc, ndst);
  if (count == 0) return;
  for_each_batch(dsts, ndst, srcs, nsrc, [&](const LateSpanPointers& p, bool last) {
    dispatch(dtype, [&](auto tag) {
      using T = decltype(tag);
      BAGUA_LAUNCH(late_reduce_spans_kernel<T>, late_blocks_for(count), 256, 0, static_cast<cudaStream_t>(stream), p,
                   count, op, last ? divisor : 0);
    });
    check_launch("CUDA reduction of late spans");
  });
  for (int d = kMaxReduceSpans; d < ndst; ++d) late_copy_bytes(dsts[d], dsts[0], count * datatype_size(dtype), stream);
}

namespace {
template <typename T>
__global__ void average_correct_kernel(T* x, const T* sum, const T* snapshot, size_t count, int n) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<size_t>(gridDim.x) * blockDim.x)
    x[i] = average_correction<T>(x[i], sum[i], snapshot[i], n);
}
}  // namespace

void average_correct(void* x, const void* sum, const void* snapshot, size_t count, bagua_datatype_t dtype, int n,
                     void* stream) {
  if (count == 0) return;
  auto s = static_cast<cudaStream_t>(stream);
  if (dtype == BAGUA_FLOAT32)
    BAGUA_LAUNCH(average_correct_kernel<float>, blocks_for(count), 256, 0, s, static_cast<float*>(x),
                 static_cast<const float*>(sum), static_cast<const float*>(snapshot), count, n);
  else if (dtype == BAGUA_FLOAT64)
    BAGUA_LAUNCH(average_correct_kernel<double>, blocks_for(count), 256, 0, s, static_cast<double*>(x),
                 static_cast<const double*>(sum), static_cast<const double*>(snapshot), count, n);
  else
    fail(BAGUA_ERR_INVALID_ARGUMENT, "averaging corrections are float32 or float64");
  check_launch("CUDA averaging correction");
}

void load_kernels() {
  for (bagua_datatype_t dtype : {BAGUA_INT8, BAGUA_UINT8, BAGUA_INT32, BAGUA_UINT32, BAGUA_INT64, BAGUA_UINT64,
                                 BAGUA_FLOAT16, BAGUA_BFLOAT16, BAGUA_FLOAT32, BAGUA_FLOAT64})
    dispatch(dtype, [](auto tag) {
      using T = decltype(tag);
      cudaFuncAttributes attrs;
      if (cudaFuncGetAttributes(&attrs, reduce_kernel<T>) != cudaSuccess ||
          cudaFuncGetAttributes(&attrs, divide_kernel<T>) != cudaSuccess ||
          cudaFuncGetAttributes(&attrs, reduce_spans_kernel<T>) != cudaSuccess ||
          cudaFuncGetAttributes(&attrs, late_reduce_spans_kernel<T>) != cudaSuccess)
        check_launch("loading the CUDA reduction kernels");
    });
  cudaFuncAttributes attrs;
  if (cudaFuncGetAttributes(&attrs, copy_kernel<uint4>) != cudaSuccess ||
      cudaFuncGetAttributes(&attrs, copy_kernel<uint32_t>) != cudaSuccess ||
      cudaFuncGetAttributes(&attrs, copy_kernel<uint8_t>) != cudaSuccess ||
      cudaFuncGetAttributes(&attrs, late_copy_kernel) != cudaSuccess)
    check_launch("loading the CUDA copy kernels");
  if (cudaFuncGetAttributes(&attrs, average_correct_kernel<float>) != cudaSuccess ||
      cudaFuncGetAttributes(&attrs, average_correct_kernel<double>) != cudaSuccess)
    check_launch("loading the CUDA averaging kernels");
  load_quantize_kernels();
  load_extra_kernels();
}

void synchronize(void* stream) {
  cudaError_t err = cudaStreamSynchronize(static_cast<cudaStream_t>(stream));
  if (err != cudaSuccess) fail(BAGUA_ERR_CUDA, "cudaStreamSynchronize: {}", cudaGetErrorString(err));
}

}  // namespace bagua::cuda

// CUDA min-max quantization ("minmax v1", docs/formats.md) with the CPU's arithmetic, one team of threads per
// chunk (chunk_team.h). The team finds the chunk's min and max with shuffles (exact, so the order does not matter),
// then each thread codes its quads: t = (x - min) * inv_step, rint or stochastic_code (quantize_math.h), clamp;
// the warp puts whole code words together. The same kernel does the owner step of the compressed scatter-reduce
// (own values plus the peers' decompressed blocks, then compress), so the sum stays in registers.
#include <cuda_runtime_api.h>

#include <cstdint>

#include "base/error.h"
#include "kernels/cuda/chunk_team.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/launch.h"
#include "kernels/half.h"
#include "kernels/quantize_math.h"

namespace bagua::cuda {

namespace {

constexpr size_t kHeaderBytes = 8;
constexpr int kMaxFusedInputs = 16;
constexpr unsigned kMaxTeamWarps = kMaxTeamThreads / 32;

__host__ __device__ size_t code_bytes(size_t len, int bits) {
  size_t raw = (len * static_cast<size_t>(bits) + 7) / 8;
  return (raw + 3) & ~size_t(3);
}

struct Grid {
  float min, max, step, inv_step;
  bool poisoned;
};

__device__ Grid make_grid(float lo, float hi, int bits, bool poisoned) {
  Grid g{lo, hi, 0.0f, 0.0f, poisoned};
  if (poisoned) {
    g.min = g.max = __int_as_float(0x7fc00000);
    return g;
  }
  float levels = static_cast<float>((1u << bits) - 1);
  g.step = (hi - lo) / levels;
  g.inv_step = g.step > 0 ? levels / (hi - lo) : 0.0f;
  if (!isfinite(g.step) || !isfinite(g.inv_step)) {
    g.step = 0;
    g.inv_step = 0;
  }
  return g;
}

// What decoding a chunk's block needs from its header.
struct BlockGrid {
  float lo, step;
  bool poisoned;
};

__device__ BlockGrid read_block_grid(const uint8_t* block, int bits, bool words) {
  float lo = load_float(block, words), hi = load_float(block + 4, words);
  BlockGrid g{lo, 0.0f, isnan(lo) || isnan(hi)};
  if (g.poisoned) {  // every element NaN, as the CPU's make_grid (also when only the max is)
    g.lo = __int_as_float(0x7fc00000);
  } else {  // make_grid's step (zero where the range or its inverse overflows)
    const float levels = static_cast<float>((1u << bits) - 1);
    g.step = (hi - lo) / levels;
    const float inv_step = g.step > 0 ? levels / (hi - lo) : 0.0f;
    if (!isfinite(g.step) || !isfinite(inv_step)) g.step = 0.0f;
  }
  return g;
}

template <int Bits>
__device__ void dequantize_quad(const uint8_t* block, const BlockGrid& g, size_t q, bool words, float deq[4]) {
  const uint32_t codes = load_quad_codes<Bits>(block + kHeaderBytes, q, words);
#pragma unroll
  for (int m = 0; m < 4; ++m) {
    const uint32_t c = (codes >> (m * Bits)) & ((1u << Bits) - 1);
    deq[m] = canonical_float(g.poisoned ? g.lo : g.lo + static_cast<float>(c) * g.step);
  }
}

struct FusedInputs {
  const uint8_t* block[kMaxFusedInputs];
  int count;
};

struct CompressArgs {
  const void* x;  // count values of dtype
  bagua_datatype_t dtype;
  FusedInputs inputs;  // compressed blocks (the same format) added to x first, in order
  float* reduced;      // receives x plus the inputs, before error feedback; may be NULL
  bool compress;       // false: only the sum into reduced
  float* error;        // error feedback, or NULL
  size_t count, chunk, block_bytes;
  unsigned team_threads;
  bool wide;        // every float buffer allows quad-wide accesses
  bool words;       // every compressed buffer is 4-byte aligned
  bool pair_draws;  // index_base and chunk are multiples of 32: lanes l and l ^ 4 share pair hashes
  uint64_t seed, step, index_base, key_high;
  uint32_t rank;
  uint32_t keys[2];  // draw_key for index >> 32 == key_high and key_high + 1
  uint8_t* out;
};

__device__ uint32_t element_key(const CompressArgs& a, uint64_t index) {
  const uint64_t high = index >> 32;
  if (high == a.key_high) return a.keys[0];
  if (high == a.key_high + 1) return a.keys[1];
  return draw_key(a.seed, a.step, a.rank, high);
}

// keyed_draw16 of the quad's four elements. Every lane of the warp must call it (pair_draws shuffles).
__device__ void quad_draws(const CompressArgs& a, size_t first, uint32_t r[4]) {
  const uint64_t index = a.index_base + first;
  if (a.pair_draws) {
    // Lane l holds elements i..i+3 and lane l ^ 4 elements i+16..i+19 of one aligned block of 32 indices: the
    // same four pair hashes, whose low halves are the lower lane's draws and high halves the upper lane's.
    const bool upper = (threadIdx.x & 4u) != 0;
    const uint32_t low = static_cast<uint32_t>(index);
    const uint32_t pair = ((((low >> 5) << 4) | (low & 15u)) + element_key(a, index));
    const uint32_t h0 = pair_hash(pair + (upper ? 2u : 0u)), h1 = pair_hash(pair + (upper ? 3u : 1u));
    const uint32_t o0 = __shfl_xor_sync(kFullWarp, h0, 4), o1 = __shfl_xor_sync(kFullWarp, h1, 4);
    const uint32_t h[4] = {upper ? o0 : h0, upper ? o1 : h1, upper ? h0 : o0, upper ? h1 : o1};
    for (int m = 0; m < 4; ++m) r[m] = upper ? h[m] >> 16 : h[m] & 0xffffu;
    return;
  }
  for (int m = 0; m < 4; ++m) r[m] = keyed_draw16(element_key(a, index + m), static_cast<uint32_t>(index + m));
}

template <int Bits, bool Stochastic>
__global__ void __launch_bounds__(kMaxTeamThreads) compress_kernel(const __grid_constant__ CompressArgs a) {
  __shared__ float s_min[kMaxTeamWarps], s_max[kMaxTeamWarps];
  __shared__ int s_bad[kMaxTeamWarps];
  const Team tm = this_team(a.count, a.chunk, a.team_threads);
  // Every load before any store (the compiler may not move loads above stores to other buffers).
  float v[kQuadsPerThread][4], e[kQuadsPerThread][4];
  int valid[kQuadsPerThread];
  size_t first[kQuadsPerThread];
#pragma unroll
  for (int k = 0; k < kQuadsPerThread; ++k) {
    const size_t q = tm.thread + static_cast<size_t>(k) * a.team_threads;
    first[k] = tm.begin + 4 * q;
    valid[k] = quad_valid(q, tm.len);
    load_quad(a.x, a.dtype, first[k], valid[k], a.wide, v[k]);
    if (a.error && a.compress)
      load_quad(a.error, BAGUA_FLOAT32, first[k], valid[k], a.wide, e[k]);
    else
      e[k][0] = e[k][1] = e[k][2] = e[k][3] = 0.0f;
  }
  for (int i = 0; i < a.inputs.count && tm.len > 0; ++i) {
    const uint8_t* block = a.inputs.block[i] + tm.chunk * a.block_bytes;
    const BlockGrid grid = read_block_grid(block, Bits, a.words);
#pragma unroll
    for (int k = 0; k < kQuadsPerThread; ++k) {
      if (valid[k] == 0) continue;
      float deq[4];
      dequantize_quad<Bits>(block, grid, tm.thread + static_cast<size_t>(k) * a.team_threads, a.words, deq);
#pragma unroll
      for (int m = 0; m < 4; ++m) v[k][m] = canonical_float(v[k][m] + deq[m]);
    }
  }
  float lo = __int_as_float(0x7f800000), hi = -lo;
  bool bad = false;
#pragma unroll
  for (int k = 0; k < kQuadsPerThread; ++k) {
    if (a.reduced) store_quad(a.reduced, BAGUA_FLOAT32, first[k], valid[k], a.wide, v[k]);
    if (a.error && a.compress) {
#pragma unroll
      for (int m = 0; m < 4; ++m) v[k][m] = v[k][m] + e[k][m];
    }
#pragma unroll
    for (int m = 0; m < 4; ++m) {
      if (m >= valid[k]) break;
      bad |= !isfinite(v[k][m]);
      lo = v[k][m] < lo ? v[k][m] : lo;
      hi = v[k][m] > hi ? v[k][m] : hi;
    }
  }
  if (!a.compress) return;  // the same for the whole grid

  // The team's min, max and "any non-finite": the warp by shuffles, then the team's warps in shared memory.
  for (int offset = 16; offset > 0; offset /= 2) {
    const float o_lo = __shfl_xor_sync(kFullWarp, lo, offset), o_hi = __shfl_xor_sync(kFullWarp, hi, offset);
    lo = o_lo < lo ? o_lo : lo;
    hi = o_hi > hi ? o_hi : hi;
  }
  bad = __any_sync(kFullWarp, bad) != 0;
  if (a.team_threads > 32) {
    const unsigned warp = threadIdx.x / 32, team_warps = a.team_threads / 32;
    if (threadIdx.x % 32 == 0) {
      s_min[warp] = lo;
      s_max[warp] = hi;
      s_bad[warp] = bad;
    }
    __syncthreads();
    for (unsigned w = tm.index * team_warps; w < (tm.index + 1) * team_warps; ++w) {
      lo = s_min[w] < lo ? s_min[w] : lo;
      hi = s_max[w] > hi ? s_max[w] : hi;
      bad |= s_bad[w] != 0;
    }
  }
  const Grid g = make_grid(unsigned_zero(lo), unsigned_zero(hi), Bits, bad);
  uint8_t* block = a.out + tm.chunk * a.block_bytes;
  if (tm.len > 0 && tm.thread == 0) {
    store_float(block, g.min, a.words);
    store_float(block + 4, g.max, a.words);
  }
  const size_t nbytes = code_bytes(tm.len, Bits);
  const int32_t top = (1 << Bits) - 1;
#pragma unroll
  for (int k = 0; k < kQuadsPerThread; ++k) {
    const size_t q = tm.thread + static_cast<size_t>(k) * a.team_threads;
    uint32_t r[4] = {0, 0, 0, 0};
    if constexpr (Stochastic) quad_draws(a, first[k], r);
    uint32_t c[4] = {0, 0, 0, 0}, quad_codes = 0;
#pragma unroll
    for (int m = 0; m < 4; ++m) {
      if (m >= valid[k] || g.poisoned) break;
      const float t = (v[k][m] - g.min) * g.inv_step;
      if constexpr (Stochastic) {
        c[m] = static_cast<uint32_t>(stochastic_code(t, r[m], top));
      } else {
        float rounded = rintf(t);
        rounded = rounded >= 0.0f ? (rounded > top ? static_cast<float>(top) : rounded) : 0.0f;  // NaN: 0
        c[m] = static_cast<uint32_t>(rounded);
      }
      quad_codes |= c[m] << (m * Bits);
    }
    const uint32_t word = gather_code_word<Bits>(quad_codes);
    store_code_word<Bits>(block + kHeaderBytes, q, word, nbytes, a.words);
    if (a.error && valid[k] > 0) {
#pragma unroll
      for (int m = 0; m < 4; ++m) {
        const float deq = g.poisoned ? g.min : g.min + static_cast<float>(c[m]) * g.step;
        e[k][m] = feedback_residual(v[k][m] - deq);
      }
      store_quad(a.error, BAGUA_FLOAT32, first[k], valid[k], a.wide, e[k]);
    }
  }
}

struct DecompressArgs {
  const uint8_t* in;
  size_t count, chunk, block_bytes;
  unsigned team_threads;
  void* out;  // dtype; float32 when accumulating
  bagua_datatype_t dtype;
  bool accumulate, wide, words;
};

// out = deq(in), or out = canonical(out + deq(in)).
template <int Bits>
__global__ void __launch_bounds__(kMaxTeamThreads) decompress_kernel(const __grid_constant__ DecompressArgs a) {
  const Team tm = this_team(a.count, a.chunk, a.team_threads);
  if (tm.len == 0) return;
  const uint8_t* block = a.in + tm.chunk * a.block_bytes;
  const BlockGrid g = read_block_grid(block, Bits, a.words);
  float deq[kQuadsPerThread][4], acc[kQuadsPerThread][4];
  int valid[kQuadsPerThread];
  size_t first[kQuadsPerThread];
#pragma unroll
  for (int k = 0; k < kQuadsPerThread; ++k) {  // every load before any store
    const size_t q = tm.thread + static_cast<size_t>(k) * a.team_threads;
    first[k] = tm.begin + 4 * q;
    valid[k] = quad_valid(q, tm.len);
    if (valid[k] == 0) continue;
    dequantize_quad<Bits>(block, g, q, a.words, deq[k]);
    if (a.accumulate) load_quad(a.out, BAGUA_FLOAT32, first[k], valid[k], a.wide, acc[k]);
  }
#pragma unroll
  for (int k = 0; k < kQuadsPerThread; ++k) {
    if (valid[k] == 0) continue;
    if (a.accumulate) {
#pragma unroll
      for (int m = 0; m < 4; ++m) acc[k][m] = canonical_float(acc[k][m] + deq[k][m]);
      store_quad(a.out, BAGUA_FLOAT32, first[k], valid[k], a.wide, acc[k]);
    } else {
      store_quad(a.out, a.dtype, first[k], valid[k], a.wide, deq[k]);
    }
  }
}

void check_launch(const char* what) {
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) fail(BAGUA_ERR_CUDA, "{}: {}", what, cudaGetErrorString(err));
}

size_t wide_alignment(bagua_datatype_t dtype) { return dtype == BAGUA_FLOAT32 ? 16 : 8; }

CompressArgs compress_args(const void* x, bagua_datatype_t dtype, size_t count, float* error, const MinMaxFormat& f,
                           const RoundingKey& key, uint8_t* out) {
  CompressArgs a{};
  a.x = x;
  a.dtype = dtype;
  a.compress = true;
  a.error = error;
  a.count = count;
  a.chunk = f.chunk;
  a.block_bytes = kHeaderBytes + code_bytes(f.chunk, f.bits);
  a.team_threads = team_shape(count, f.chunk).team_threads;
  a.wide = f.chunk % 4 == 0 && aligned_to(x, wide_alignment(dtype)) && aligned_to(error, 16);
  a.words = aligned_to(out, 4);
  a.pair_draws = key.index_base % 32 == 0 && f.chunk % 32 == 0;
  a.seed = key.seed;
  a.step = key.step;
  a.rank = key.rank;
  a.index_base = key.index_base;
  a.key_high = key.index_base >> 32;
  a.keys[0] = draw_key(key.seed, key.step, key.rank, a.key_high);
  a.keys[1] = draw_key(key.seed, key.step, key.rank, a.key_high + 1);
  a.out = out;
  return a;
}

template <int Bits>
void launch_compress(const CompressArgs& a, bool stochastic, cudaStream_t stream) {
  const TeamShape shape = team_shape(a.count, a.chunk);
  if (shape.blocks > 0x7fffffffu) fail(BAGUA_ERR_INVALID_ARGUMENT, "{} elements are too many for one launch", a.count);
  const auto blocks = static_cast<unsigned>(shape.blocks);
  const auto kernel = stochastic ? compress_kernel<Bits, true> : compress_kernel<Bits, false>;
  BAGUA_LAUNCH(kernel, blocks, shape.block_threads(), 0, stream, a);
}

void launch_compress(const CompressArgs& a, int bits, bool stochastic, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  switch (bits) {
    case 8: launch_compress<8>(a, stochastic, s); break;
    case 4: launch_compress<4>(a, stochastic, s); break;
    case 2: launch_compress<2>(a, stochastic, s); break;
    default: launch_compress<1>(a, stochastic, s); break;
  }
  check_launch("CUDA min-max compress");
}

void decompress(const uint8_t* in, size_t count, const MinMaxFormat& f, void* out, bool accumulate,
                bagua_datatype_t dtype, void* stream) {
  validate(f);
  if (count == 0) return;
  const TeamShape shape = team_shape(count, f.chunk);
  if (shape.blocks > 0x7fffffffu) fail(BAGUA_ERR_INVALID_ARGUMENT, "{} elements are too many for one launch", count);
  DecompressArgs a{};
  a.in = in;
  a.count = count;
  a.chunk = f.chunk;
  a.block_bytes = kHeaderBytes + code_bytes(f.chunk, f.bits);
  a.team_threads = shape.team_threads;
  a.out = out;
  a.dtype = dtype;
  a.accumulate = accumulate;
  a.wide = f.chunk % 4 == 0 && aligned_to(out, wide_alignment(dtype));
  a.words = aligned_to(in, 4);
  const auto blocks = static_cast<unsigned>(shape.blocks);
  auto s = static_cast<cudaStream_t>(stream);
  switch (f.bits) {
    case 8: BAGUA_LAUNCH(decompress_kernel<8>, blocks, shape.block_threads(), 0, s, a); break;
    case 4: BAGUA_LAUNCH(decompress_kernel<4>, blocks, shape.block_threads(), 0, s, a); break;
    case 2: BAGUA_LAUNCH(decompress_kernel<2>, blocks, shape.block_threads(), 0, s, a); break;
    default: BAGUA_LAUNCH(decompress_kernel<1>, blocks, shape.block_threads(), 0, s, a); break;
  }
  check_launch("CUDA min-max decompress");
}

template <int Bits>
void load_for_bits() {
  cudaFuncAttributes attrs;
  if (cudaFuncGetAttributes(&attrs, compress_kernel<Bits, false>) != cudaSuccess ||
      cudaFuncGetAttributes(&attrs, compress_kernel<Bits, true>) != cudaSuccess ||
      cudaFuncGetAttributes(&attrs, decompress_kernel<Bits>) != cudaSuccess)
    check_launch("loading the CUDA min-max kernels");
}

}  // namespace

void minmax_compress_typed(const void* x, bagua_datatype_t dtype, size_t count, float* error,
                           const MinMaxFormat& format, const RoundingKey& key, uint8_t* out, void* stream) {
  validate(format);
  if (dtype != BAGUA_FLOAT32 && dtype != BAGUA_FLOAT16 && dtype != BAGUA_BFLOAT16)
    fail(BAGUA_ERR_INVALID_ARGUMENT, "quantization takes float32, float16 or bfloat16 input");
  if (count == 0) return;
  launch_compress(compress_args(x, dtype, count, error, format, key, out), format.bits, key.stochastic, stream);
}

void minmax_compress(const float* x, size_t count, const MinMaxFormat& format, const RoundingKey& key, uint8_t* out,
                     void* stream) {
  minmax_compress_typed(x, BAGUA_FLOAT32, count, nullptr, format, key, out, stream);
}

void minmax_decompress_accumulate(const uint8_t* in, size_t count, const MinMaxFormat& format, float* acc,
                                  void* stream) {
  decompress(in, count, format, acc, true, BAGUA_FLOAT32, stream);
}

void minmax_decompress(const uint8_t* in, size_t count, const MinMaxFormat& format, void* x, bagua_datatype_t dtype,
                       void* stream) {
  decompress(in, count, format, x, false, dtype, stream);
}

void minmax_reduce_recompress(const uint8_t* const* inputs, int ninputs, const float* own, size_t count,
                              const MinMaxFormat& format, const RoundingKey& key, float* owner_error, uint8_t* out,
                              float* reduced, float* scratch, void* stream) {
  // The CPU's order: acc = own, then += each input in turn, then compress acc (adding the owner's error). One
  // kernel per kMaxFusedInputs inputs; the sums before the last batch go through scratch.
  validate(format);
  if (ninputs < 0) fail(BAGUA_ERR_INVALID_ARGUMENT, "{} inputs", ninputs);
  if (count == 0) return;
  const float* values = own;
  int done = 0;
  for (;;) {
    const bool last = ninputs - done <= kMaxFusedInputs;
    CompressArgs a = compress_args(values, BAGUA_FLOAT32, count, owner_error, format, key, out);
    a.compress = last;
    a.reduced = last ? reduced : scratch;
    a.inputs.count = last ? ninputs - done : kMaxFusedInputs;
    a.wide = a.wide && aligned_to(a.reduced, 16);
    for (int i = 0; i < a.inputs.count; ++i) {
      a.inputs.block[i] = inputs[done + i];
      a.words = a.words && aligned_to(inputs[done + i], 4);
    }
    launch_compress(a, format.bits, key.stochastic, stream);
    if (last) return;
    values = scratch;
    done += kMaxFusedInputs;
  }
}

void load_quantize_kernels() {
  load_for_bits<1>();
  load_for_bits<2>();
  load_for_bits<4>();
  load_for_bits<8>();
}

}  // namespace bagua::cuda

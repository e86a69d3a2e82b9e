// The SIMT emulator's scheduler (simt.h) and the part of the CUDA runtime the kernels and their test use, on host
// memory. Fibers switch with a few instructions of x86-64 assembly (swapcontext's signal-mask system call made the
// test four times slower).
#include "simt/simt.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <vector>

// Saves the callee-saved registers on the current stack and its pointer in *save, then resumes the stack `target`
// (saved the same way, or prepared by start_stack).
extern "C" void simt_switch(void** save, void* target);
asm(R"(
  .text
  .globl simt_switch
  .type simt_switch, @function
simt_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size simt_switch, .-simt_switch
)");

namespace simt {

namespace {

constexpr size_t kStackBytes = 256 * 1024;

enum class State { kRunnable, kAtWarpSync, kAtBlockSync, kExited };

struct Fiber {
  void* stack_pointer = nullptr;
  dim3 index;
  State state = State::kRunnable;
};

struct Machine {
  dim3 grid, block, block_idx;
  std::vector<Fiber> fibers;
  std::vector<std::unique_ptr<char[]>> stacks;
  std::vector<uint64_t> slots;  // one exchange slot per thread
  std::vector<unsigned char> shared;
  void* scheduler = nullptr;  // the scheduler's stack pointer while a fiber runs
  size_t current = 0;
  const std::function<void()>* body = nullptr;
  bool running = false;
};

Machine& machine() {
  static Machine m;
  return m;
}

[[noreturn]] void stuck(const char* why) {
  Machine& m = machine();
  std::fprintf(stderr, "simt: %s (block %u, thread %zu)\n", why, m.block_idx.x, m.current);
  const char* names[] = {"runnable", "at a shuffle/vote", "at __syncthreads", "exited"};
  for (size_t w = 0; w < m.fibers.size(); w += 32) {
    std::fprintf(stderr, "  warp %zu:", w / 32);
    for (size_t i = w; i < std::min(w + 32, m.fibers.size()); ++i)
      std::fprintf(stderr, " %s", names[static_cast<int>(m.fibers[i].state)]);
    std::fprintf(stderr, "\n");
  }
  std::abort();
}

[[noreturn]] void fiber_main() {
  Machine& m = machine();
  (*m.body)();
  Fiber& f = m.fibers[m.current];
  f.state = State::kExited;
  simt_switch(&f.stack_pointer, m.scheduler);  // never resumed
  std::abort();
}

// A stack whose first simt_switch "returns" into fiber_main, entered as if called (rsp = 8 mod 16).
void* start_stack(char* stack, size_t bytes) {
  auto top = reinterpret_cast<uintptr_t>(stack + bytes) & ~uintptr_t(15);
  auto* slot = reinterpret_cast<void**>(top);
  *--slot = nullptr;                                    // fiber_main's return address: it never returns
  *--slot = reinterpret_cast<void*>(&fiber_main);       // simt_switch's ret
  for (int reg = 0; reg < 6; ++reg) *--slot = nullptr;  // rbp, rbx, r12-r15
  return slot;
}

void wait(State state) {
  Machine& m = machine();
  Fiber& f = m.fibers[m.current];
  f.state = state;
  simt_switch(&f.stack_pointer, m.scheduler);
}

// Runs the block's fibers until all have exited, releasing barriers once every thread they wait for is there.
void run_block(Machine& m) {
  const size_t n = m.fibers.size();
  for (;;) {
    for (size_t i = 0; i < n; ++i) {
      if (m.fibers[i].state != State::kRunnable) continue;
      m.current = i;
      simt_switch(&m.scheduler, m.fibers[i].stack_pointer);
    }
    size_t live = 0, at_block = 0;
    for (const Fiber& f : m.fibers) {
      live += f.state != State::kExited;
      at_block += f.state == State::kAtBlockSync;
    }
    if (live == 0) return;
    bool released = false;
    for (size_t w = 0; w < n; w += 32) {
      const size_t end = std::min(w + 32, n);
      size_t waiting = 0, exited = 0;
      for (size_t i = w; i < end; ++i) {
        waiting += m.fibers[i].state == State::kAtWarpSync;
        exited += m.fibers[i].state == State::kExited;
      }
      if (waiting == 0) continue;
      if (waiting == end - w) {
        for (size_t i = w; i < end; ++i) m.fibers[i].state = State::kRunnable;
        released = true;
      } else if (waiting + exited == end - w) {
        m.current = w;
        stuck("a full-warp shuffle or vote waits for lanes that have exited");
      }
    }
    if (!released && at_block == live) {
      for (Fiber& f : m.fibers)
        if (f.state == State::kAtBlockSync) f.state = State::kRunnable;
      released = true;
    }
    if (!released) stuck("no barrier can complete: a divergent __syncthreads or shuffle");
  }
}

}  // namespace

const dim3& thread_index() { return machine().fibers[machine().current].index; }
const dim3& block_index() { return machine().block_idx; }
const dim3& block_dim() { return machine().block; }
const dim3& grid_dim() { return machine().grid; }
void* dynamic_shared() { return machine().shared.data(); }
unsigned lane_id() { return static_cast<unsigned>(machine().current % 32); }

void launch(dim3 grid, dim3 block, size_t shared_bytes, const std::function<void()>& body) {
  Machine& m = machine();
  if (m.running) stuck("a launch from inside a kernel");
  if (grid.y != 1 || grid.z != 1 || block.y != 1 || block.z != 1 || block.x == 0 || block.x > 1024)
    stuck("only 1-D grids and blocks of 1 to 1024 threads are emulated");
  const size_t n = block.x;
  while (m.stacks.size() < n) m.stacks.push_back(std::make_unique<char[]>(kStackBytes));
  m.fibers.assign(n, Fiber{});
  m.slots.assign(n, 0);
  m.grid = grid;
  m.block = block;
  m.body = &body;
  m.running = true;
  for (unsigned b = 0; b < grid.x; ++b) {
    m.block_idx = dim3(b, 0, 0);
    m.shared.assign(shared_bytes, 0xA5);  // not zero: a read before any write shows
    for (size_t i = 0; i < n; ++i) {
      Fiber& f = m.fibers[i];
      f.stack_pointer = start_stack(m.stacks[i].get(), kStackBytes);
      f.index = dim3(static_cast<unsigned>(i), 0, 0);
      f.state = State::kRunnable;
    }
    run_block(m);
  }
  m.running = false;
}

void block_sync() { wait(State::kAtBlockSync); }

namespace {
// Every lane of the calling warp publishes `bits`; returns the warp's first slot once all 32 have.
const uint64_t* publish(unsigned mask, uint64_t bits) {
  Machine& m = machine();
  const size_t base = m.current / 32 * 32;
  if (mask != 0xffffffffu) stuck("only full-warp masks are emulated");
  if (base + 32 > m.fibers.size()) stuck("a full-warp shuffle in a partial warp");
  m.slots[m.current] = bits;
  wait(State::kAtWarpSync);
  return &m.slots[base];
}
}  // namespace

uint64_t exchange(unsigned mask, uint64_t bits, unsigned src) {
  const uint64_t got = publish(mask, bits)[src % 32];
  wait(State::kAtWarpSync);  // every lane has read before any slot is written again
  return got;
}

bool any(unsigned mask, bool predicate) {
  const uint64_t* slots = publish(mask, predicate ? 1 : 0);
  bool result = false;
  for (int lane = 0; lane < 32; ++lane) result |= slots[lane] != 0;
  wait(State::kAtWarpSync);
  return result;
}

}  // namespace simt

// The runtime calls of the kernels' host code and of tests/cuda/cuda_kernels.cu, on host memory.
cudaError_t cudaGetLastError() { return cudaSuccess; }
const char* cudaGetErrorString(cudaError_t) { return "(SIMT emulator)"; }
cudaError_t cudaGetDeviceCount(int* count) {
  *count = 1;
  return cudaSuccess;
}
cudaError_t cudaMalloc(void** ptr, size_t bytes) {
  *ptr = std::aligned_alloc(256, (bytes + 255) / 256 * 256);  // cudaMalloc's alignment
  return *ptr ? cudaSuccess : cudaErrorMemoryAllocation;
}
cudaError_t cudaFree(void* ptr) {
  std::free(ptr);
  return cudaSuccess;
}
cudaError_t cudaHostAlloc(void** ptr, size_t bytes, unsigned int) { return cudaMalloc(ptr, bytes); }
cudaError_t cudaFreeHost(void* ptr) { return cudaFree(ptr); }
cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind) {
  std::memcpy(dst, src, bytes);
  return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind, cudaStream_t) {
  std::memcpy(dst, src, bytes);
  return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }

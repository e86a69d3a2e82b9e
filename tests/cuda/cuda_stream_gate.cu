// What a user stream parked on a stream gate blocks, on a real GPU (docs/cuda.md, "What a parked stream blocks").
// A device call parks the caller's stream on a host-mapped word (cuStreamWaitValue32) until the library's thread
// releases it; the user's thread may meanwhile queue work behind the gate, some of which (a copy to or from pageable
// memory, a synchronize) waits inside the driver until the gate opens. On the H200 the device path then stalled
// until BAGUA_TIMEOUT. This maps, with the gate parked and each kind of user work behind it:
//   1. which CUDA calls of another thread block until the gate opens (the library's thread makes such calls);
//   2. which work on another stream (copy engines, kernels) does not finish until the gate opens;
//   3. whether a protocol that puts all of a call's device work on the caller's stream around the gate, signals
//      through host-mapped words (cuStreamWriteValue32) and makes no CUDA call from the library's thread, completes.
//   4. whether a stream-ordered allocation on another stream waits for a free queued behind the gate: the device's
//      default pool (a report) and the library's own pool (DeviceRuntime::alloc_device_async, which must not).
// Parts 1 and 2 are a report; parts 3 and 4, and the copy kernel's exactness, decide the exit code. A thread that makes
// no CUDA call opens every gate after a deadline, so the probe never hangs, whatever blocks. Output is unbuffered (a
// timeout keeps what was printed). Exits 77 (skip) without a CUDA device.
#include <cuda.h>
#include <cuda_runtime_api.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <thread>
#include <vector>

#include "kernels/cuda/cuda_kernels.h"
#include "kernels/device_runtime.h"

namespace {

using Clock = std::chrono::steady_clock;
using StreamValue32 = CUresult (*)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);

constexpr size_t kBytes = 4 << 20;
constexpr int kOpenAfterMs = 300;  // parts 1 and 2: the gate opens then, whatever happened
constexpr int kBlockedMs = 200;    // a call or work that took this long waited for the gate

double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

__global__ void touch_kernel(float* x) { x[threadIdx.x] += 1.0f; }

StreamValue32 driver_fn(const char* name) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found{};
  if (cudaGetDriverEntryPointByVersion(name, &fn, 12000, cudaEnableDefault, &found) != cudaSuccess ||
      found != cudaDriverEntryPointSuccess)
    return nullptr;
  return reinterpret_cast<StreamValue32>(fn);
}

// A host-mapped word that streams wait on or write.
struct Word {
  volatile uint32_t* host = nullptr;
  CUdeviceptr device = 0;
  void make() {
    void* p = nullptr;
    cudaHostAlloc(&p, 64, cudaHostAllocMapped | cudaHostAllocPortable);
    host = static_cast<volatile uint32_t*>(p);
    *host = 0;
    void* d = nullptr;
    cudaHostGetDevicePointer(&d, p, 0);
    device = reinterpret_cast<CUdeviceptr>(d);
  }
  void store(uint32_t v) { __atomic_store_n(host, v, __ATOMIC_RELEASE); }
  uint32_t load() const { return __atomic_load_n(host, __ATOMIC_ACQUIRE); }
};

struct Bed {
  StreamValue32 wait_value = nullptr, write_value = nullptr;
  Word gate;
  uint32_t generation = 0;
  cudaStream_t user = nullptr, ours = nullptr;
  void *dev_a = nullptr, *dev_b = nullptr, *dev_c = nullptr, *dev_d = nullptr, *pinned_user = nullptr,
       *pinned_ours = nullptr;
  std::vector<uint8_t> pageable = std::vector<uint8_t>(kBytes);
};

enum Behind { kNothing, kPageableD2H, kPageableH2D, kPinnedD2H, kPinnedH2D, kDeviceCopy, kKernel, kSync, kBehindCount };
const char* kBehindNames[] = {"nothing",    "pageable D2H", "pageable H2D", "pinned D2H",
                              "pinned H2D", "D2D copy",     "kernel",       "stream sync"};

// The user's thread: queues `what` behind the gate (copies to or from pageable memory, and the synchronize, return
// only once the gate has opened).
void user_work(Bed& bed, Behind what) {
  const size_t n = kBytes;
  switch (what) {
    case kNothing: break;
    case kPageableD2H: cudaMemcpyAsync(bed.pageable.data(), bed.dev_a, n, cudaMemcpyDeviceToHost, bed.user); break;
    case kPageableH2D: cudaMemcpyAsync(bed.dev_a, bed.pageable.data(), n, cudaMemcpyHostToDevice, bed.user); break;
    case kPinnedD2H: cudaMemcpyAsync(bed.pinned_user, bed.dev_a, n, cudaMemcpyDeviceToHost, bed.user); break;
    case kPinnedH2D: cudaMemcpyAsync(bed.dev_a, bed.pinned_user, n, cudaMemcpyHostToDevice, bed.user); break;
    case kDeviceCopy: cudaMemcpyAsync(bed.dev_a, bed.dev_b, n, cudaMemcpyDeviceToDevice, bed.user); break;
    case kKernel: touch_kernel<<<1, 32, 0, bed.user>>>(static_cast<float*>(bed.dev_a)); break;
    case kSync: cudaStreamSynchronize(bed.user); break;
    default: break;
  }
}

// Parks the user's stream, starts the user's work behind it, runs `probe` on this thread and opens the gate after
// kOpenAfterMs from a thread that makes no CUDA call. Returns when everything has drained.
void with_parked_stream(Bed& bed, Behind behind, const std::function<void()>& probe) {
  const uint32_t value = ++bed.generation;
  bed.wait_value(reinterpret_cast<CUstream>(bed.user), bed.gate.device, value, CU_STREAM_WAIT_VALUE_GEQ);
  std::atomic<bool> stop{false};
  std::thread opener([&] {
    auto until = Clock::now() + std::chrono::milliseconds(kOpenAfterMs);
    while (!stop.load() && Clock::now() < until) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    bed.gate.store(value);
  });
  std::thread user([&] { user_work(bed, behind); });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the user's work reaches the driver first
  probe();
  opener.join();
  user.join();
  cudaStreamSynchronize(bed.user);
  cudaStreamSynchronize(bed.ours);
  cudaGetLastError();
}

// Part 1: one CUDA call, timed, on this thread while the stream is parked.
struct HostCall {
  const char* name;
  std::function<void(Bed&)> call;
};

// Part 2: work on our stream; 'y' finished with the gate parked, 'n' only after it opened, 'L' queuing it blocked
// the queuing thread until the gate opened.
struct OurWork {
  const char* name;
  std::function<void(Bed&)> queue;
};

}  // namespace

int main() {
  setvbuf(stdout, nullptr, _IONBF, 0);
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("no CUDA device: skipped\n");
    return 77;
  }
  cudaSetDevice(0);
  Bed bed;
  bed.wait_value = driver_fn("cuStreamWaitValue32");
  bed.write_value = driver_fn("cuStreamWriteValue32");
  if (!bed.wait_value || !bed.write_value) {
    std::printf("FAIL: no cuStreamWaitValue32 or cuStreamWriteValue32\n");
    return 1;
  }
  bagua::cuda::load_kernels();
  cudaFuncAttributes attrs;
  cudaFuncGetAttributes(&attrs, touch_kernel);
  cudaStreamCreateWithFlags(&bed.user, cudaStreamNonBlocking);
  cudaStreamCreateWithFlags(&bed.ours, cudaStreamNonBlocking);
  bed.gate.make();
  for (void** p : {&bed.dev_a, &bed.dev_b, &bed.dev_c, &bed.dev_d}) cudaMalloc(p, kBytes);
  cudaHostAlloc(&bed.pinned_user, kBytes, cudaHostAllocMapped | cudaHostAllocPortable);
  cudaHostAlloc(&bed.pinned_ours, kBytes, cudaHostAllocMapped | cudaHostAllocPortable);
  if (cudaDeviceSynchronize() != cudaSuccess) {
    std::printf("FAIL: setup\n");
    return 1;
  }
  int failures = 0;

  // ---- part 1: CUDA calls of another thread ----
  Word scratch_word;
  scratch_word.make();
  cudaEvent_t recorded = nullptr;
  cudaEventCreateWithFlags(&recorded, cudaEventDisableTiming);
  cudaEventRecord(recorded, bed.ours);
  cudaStreamSynchronize(bed.ours);
  std::vector<HostCall> calls = {
      {"cudaGetDevice",
       [](Bed&) {
         int d;
         cudaGetDevice(&d);
       }},
      {"cudaSetDevice", [](Bed&) { cudaSetDevice(0); }},
      {"cudaEventQuery", [&](Bed&) { cudaEventQuery(recorded); }},
      {"cudaEventCreate",
       [](Bed&) {
         cudaEvent_t e;
         cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
         cudaEventDestroy(e);
       }},
      {"cudaEventRecord", [&](Bed& b) { cudaEventRecord(recorded, b.ours); }},
      {"cudaPointerGetAttributes",
       [](Bed& b) {
         cudaPointerAttributes a;
         cudaPointerGetAttributes(&a, b.dev_c);
       }},
      {"cudaMemcpyAsync pinned",
       [](Bed& b) { cudaMemcpyAsync(b.pinned_ours, b.dev_c, 4096, cudaMemcpyDeviceToHost, b.ours); }},
      {"kernel launch", [](Bed& b) { bagua::cuda::copy_bytes(b.dev_d, b.dev_c, 4096, b.ours); }},
      {"cuStreamWriteValue32",
       [&](Bed& b) { b.write_value(reinterpret_cast<CUstream>(b.ours), scratch_word.device, 1, 0); }},
      {"cudaHostAlloc",
       [](Bed&) {
         void* p;
         if (cudaHostAlloc(&p, 4096, cudaHostAllocMapped) == cudaSuccess) cudaFreeHost(p);
       }},
      {"cudaMallocAsync",
       [](Bed& b) {
         void* p;
         if (cudaMallocAsync(&p, 4096, b.ours) == cudaSuccess) cudaFreeAsync(p, b.ours);
       }},
      {"cudaStreamCreate",
       [](Bed&) {
         cudaStream_t s;
         cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
         cudaStreamDestroy(s);
       }},
  };
  const Behind part1_behind[] = {kPageableD2H, kPageableH2D, kPinnedD2H, kSync};
  std::printf("part 1: ms a call of another thread took with the stream parked (>= %d: it waited for the gate)\n",
              kBlockedMs);
  std::printf("%-26s", "call \\ behind the gate");
  for (Behind b : part1_behind) std::printf(" %13s", kBehindNames[b]);
  std::printf("\n");
  for (const HostCall& c : calls) {
    std::printf("%-26s", c.name);
    for (Behind b : part1_behind) {
      double took = 0;
      with_parked_stream(bed, b, [&] {
        auto start = Clock::now();
        c.call(bed);
        took = ms_since(start);
      });
      std::printf(" %13.1f", took);
    }
    std::printf("\n");
  }

  // ---- part 2: work on another stream ----
  std::vector<OurWork> works = {
      {"engine D2H", [](Bed& b) { cudaMemcpyAsync(b.pinned_ours, b.dev_c, kBytes, cudaMemcpyDeviceToHost, b.ours); }},
      {"engine H2D", [](Bed& b) { cudaMemcpyAsync(b.dev_c, b.pinned_ours, kBytes, cudaMemcpyHostToDevice, b.ours); }},
      {"engine D2D", [](Bed& b) { cudaMemcpyAsync(b.dev_c, b.dev_d, kBytes, cudaMemcpyDeviceToDevice, b.ours); }},
      {"kernel D2H", [](Bed& b) { bagua::cuda::copy_bytes(b.pinned_ours, b.dev_c, kBytes, b.ours); }},
      {"kernel H2D", [](Bed& b) { bagua::cuda::copy_bytes(b.dev_c, b.pinned_ours, kBytes, b.ours); }},
      {"kernel D2D", [](Bed& b) { bagua::cuda::copy_bytes(b.dev_c, b.dev_d, kBytes, b.ours); }},
  };
  std::printf(
      "part 2: work on another stream, queued from another thread with the stream parked: y finished before "
      "the gate opened, n only after, L queuing it waited for the gate\n");
  std::printf("%-14s", "behind \\ ours");
  for (const OurWork& w : works) std::printf(" %11s", w.name);
  std::printf("\n");
  for (int b = 0; b < kBehindCount; ++b) {
    std::printf("%-14s", kBehindNames[b]);
    for (const OurWork& w : works) {
      char result = 'n';
      Word done;  // written by our stream after the work: polled without a CUDA call
      done.make();
      with_parked_stream(bed, static_cast<Behind>(b), [&] {
        std::atomic<bool> queued{false};
        std::thread lib([&] {
          w.queue(bed);
          bed.write_value(reinterpret_cast<CUstream>(bed.ours), done.device, 1, 0);
          queued.store(true);
        });
        auto start = Clock::now();
        while (ms_since(start) < kBlockedMs && done.load() == 0)
          std::this_thread::sleep_for(std::chrono::microseconds(100));
        if (done.load() != 0)
          result = 'y';
        else if (!queued.load())
          result = 'L';
        lib.join();
      });
      cudaFreeHost(const_cast<uint32_t*>(done.host));
      std::printf(" %11c", result);
    }
    std::printf("\n");
  }

  // ---- part 3: a call whose device work is all on the caller's stream ----
  // Caller's stream: [copy in: device -> mapped staging, by kernel] [write in_word] [gate] [copy out, by kernel]
  // [write out_word]. The library's thread polls in_word, adds 1 to every staged float on the host, opens the gate
  // and polls out_word: no CUDA call. Then the user queues each kind of work behind it at once.
  std::printf("part 3: device work on the caller's stream, host-mapped words, no CUDA call on the library's thread\n");
  Word in_word, out_word;
  in_word.make();
  out_word.make();
  const size_t floats = kBytes / sizeof(float);
  std::vector<float> input(floats), output(floats);
  for (size_t i = 0; i < floats; ++i) input[i] = static_cast<float>(i % 1000);
  for (int b = 0; b < kBehindCount; ++b) {
    const Behind behind = static_cast<Behind>(b);
    cudaMemcpy(bed.dev_c, input.data(), kBytes, cudaMemcpyHostToDevice);  // (the user's work behind uses dev_a)
    const uint32_t value = ++bed.generation;
    auto start = Clock::now();
    bagua::cuda::copy_bytes(bed.pinned_ours, bed.dev_c, kBytes, bed.user);
    bed.write_value(reinterpret_cast<CUstream>(bed.user), in_word.device, value, 0);
    bed.wait_value(reinterpret_cast<CUstream>(bed.user), bed.gate.device, value, CU_STREAM_WAIT_VALUE_GEQ);
    bagua::cuda::copy_bytes(bed.dev_c, bed.pinned_ours, kBytes, bed.user);
    bed.write_value(reinterpret_cast<CUstream>(bed.user), out_word.device, value, 0);
    std::atomic<int> stage{0};
    std::thread lib([&] {
      auto deadline = Clock::now() + std::chrono::seconds(2);
      while (in_word.load() != value && Clock::now() < deadline) std::this_thread::yield();
      if (in_word.load() != value) return;
      stage.store(1);
      auto* staged = static_cast<float*>(bed.pinned_ours);
      for (size_t i = 0; i < floats; ++i) staged[i] += 1.0f;
      bed.gate.store(value);
      stage.store(2);
      while (out_word.load() != value && Clock::now() < deadline) std::this_thread::yield();
      if (out_word.load() == value) stage.store(3);
    });
    std::thread opener([&] {  // the safety net: 3 s
      auto until = Clock::now() + std::chrono::seconds(3);
      while (stage.load() < 2 && Clock::now() < until) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      bed.gate.store(value);
    });
    std::thread user([&] { user_work(bed, behind); });
    lib.join();
    opener.join();
    user.join();
    const double took = ms_since(start);
    cudaStreamSynchronize(bed.user);
    cudaMemcpy(output.data(), bed.dev_c, kBytes, cudaMemcpyDeviceToHost);
    size_t wrong = 0;
    for (size_t i = 0; i < floats; ++i) wrong += output[i] != input[i] + 1.0f;
    const bool ok = stage.load() == 3 && wrong == 0;
    std::printf("  %-14s %s in %.1f ms (stage %d, %zu wrong)\n", kBehindNames[b], ok ? "ok" : "FAILED", took,
                stage.load(), wrong);
    failures += ok ? 0 : 1;
  }

  // ---- part 4: an allocation on our stream while a free of the same size waits behind the gate ----
  // The block is freed on the parked stream, so its free completes only once the gate opens. An allocation on our
  // stream that reused it through an internal dependency finishes only after that; one that takes other memory at
  // once. Our stream then writes a word: polled, as in part 2, without a CUDA call.
  std::printf("part 4: stream-ordered allocation on another stream while a free waits behind the gate\n");
  bagua::DeviceRuntime& runtime = bagua::device_runtime();
  struct PoolCase {
    const char* name;
    bool must_not_wait;
    std::function<void*(cudaStream_t)> alloc;
    std::function<void(void*, cudaStream_t)> free;
  };
  const PoolCase pools[] = {
      {"default pool (cudaMallocAsync)", false,
       [](cudaStream_t s) {
         void* p = nullptr;
         return cudaMallocAsync(&p, kBytes, s) == cudaSuccess ? p : nullptr;
       },
       [](void* p, cudaStream_t s) { cudaFreeAsync(p, s); }},
      {"library pool (alloc_device_async)", true, [&](cudaStream_t s) { return runtime.alloc_device_async(kBytes, s); },
       [&](void* p, cudaStream_t s) { runtime.free_device_async(p, s); }},
  };
  for (const PoolCase& pool : pools) {
    void* parked_block = pool.alloc(bed.user);
    cudaStreamSynchronize(bed.user);
    Word done;
    done.make();
    char result = 'n';
    void* ours_block = nullptr;
    with_parked_stream(bed, kNothing, [&] {
      pool.free(parked_block, bed.user);  // behind the gate
      ours_block = pool.alloc(bed.ours);
      bed.write_value(reinterpret_cast<CUstream>(bed.ours), done.device, 1, 0);
      auto start = Clock::now();
      while (ms_since(start) < kBlockedMs && done.load() == 0)
        std::this_thread::sleep_for(std::chrono::microseconds(100));
      if (done.load() != 0) result = 'y';
    });
    if (ours_block != nullptr) pool.free(ours_block, bed.ours);
    cudaStreamSynchronize(bed.ours);
    cudaFreeHost(const_cast<uint32_t*>(done.host));
    const bool failed = parked_block == nullptr || ours_block == nullptr || (pool.must_not_wait && result != 'y');
    std::printf("  %-34s %s%s\n", pool.name,
                result == 'y' ? "did not wait for the gate" : "waited for the gate (reused the parked free)",
                failed ? ": FAILED" : "");
    failures += failed ? 1 : 0;
  }

  // ---- the copy kernel at odd offsets and lengths, between device and mapped pinned memory ----
  std::vector<uint8_t> src(kBytes), got(kBytes);
  for (size_t i = 0; i < kBytes; ++i) src[i] = static_cast<uint8_t>(i * 131 + 7);
  std::memcpy(bed.pinned_user, src.data(), kBytes);
  const size_t cases[][3] = {{0, 0, kBytes - 16}, {3, 3, 100001}, {4, 8, 65539}, {1, 2, 4099}, {5, 0, 17}, {0, 0, 1}};
  for (const auto& c : cases) {
    cudaMemset(bed.dev_c, 0, kBytes);
    std::memset(bed.pinned_ours, 0, kBytes);
    auto* pu = static_cast<uint8_t*>(bed.pinned_user);
    auto* po = static_cast<uint8_t*>(bed.pinned_ours);
    auto* dc = static_cast<uint8_t*>(bed.dev_c);
    auto* dd = static_cast<uint8_t*>(bed.dev_d);
    bagua::cuda::copy_bytes(dc + c[1], pu + c[0], c[2], bed.ours);
    bagua::cuda::copy_bytes(dd + c[0], dc + c[1], c[2], bed.ours);
    bagua::cuda::copy_bytes(po + c[1], dd + c[0], c[2], bed.ours);
    cudaStreamSynchronize(bed.ours);
    std::memcpy(got.data(), po, kBytes);
    bool exact = std::memcmp(got.data() + c[1], src.data() + c[0], c[2]) == 0;
    for (size_t i = 0; i < c[1] && exact; ++i) exact = got[i] == 0;
    for (size_t i = c[1] + c[2]; i < kBytes && exact; ++i) exact = got[i] == 0;
    if (!exact) {
      std::printf("FAIL: copy of %zu bytes from offset %zu to %zu differs\n", c[2], c[0], c[1]);
      ++failures;
    }
  }
  std::printf("%s\n", failures ? "stream gate: FAILED"
                               : "stream gate: part 3's protocol, part 4's pool and the copy kernel work");
  return failures ? 1 : 0;
}

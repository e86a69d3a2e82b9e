// What a parked user stream blocks on a real GPU (docs/cuda.md, "Copies by kernel"). A device call parks the user's
// stream on a host-mapped word (cuStreamWaitValue32) while the library's thread copies and reduces on a stream of
// its own; the user may queue more work behind the gate. For each kind of work behind the gate, this checks that
// the library's copies (DeviceRuntime::copy_async on its own non-blocking stream: device <-> mapped pinned memory,
// device <-> device) finish while the gate is still closed, and reports the same for plain cudaMemcpyAsync copies
// (the copy engines), which is what the library did before. Every wait is bounded: the gate opens after 300 ms.
// Exits 77 (skip) without a CUDA device.
#include <cuda.h>
#include <cuda_runtime_api.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

#include "kernels/device_runtime.h"

using namespace bagua;

namespace {

using Clock = std::chrono::steady_clock;
using WaitValue32 = CUresult (*)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);

constexpr size_t kBytes = 4 << 20;
constexpr auto kGateOpen = std::chrono::milliseconds(300);

enum Behind { kNothing, kPageableD2H, kPageableH2D, kPinnedD2H, kPinnedH2D, kDeviceCopy, kKernel, kBehindCount };
const char* kBehindNames[] = {"nothing",    "pageable D2H", "pageable H2D", "pinned D2H",
                              "pinned H2D", "D2D copy",     "kernel"};
enum Ours { kLibD2H, kLibH2D, kLibD2D, kEngineD2H, kEngineH2D, kEngineD2D, kOursCount };
const char* kOursNames[] = {"library D2H", "library H2D", "library D2D", "engine D2H", "engine H2D", "engine D2D"};

__global__ void touch_kernel(float* x) { x[threadIdx.x] += 1.0f; }

struct Bed {
  WaitValue32 wait = nullptr;
  volatile uint32_t* word = nullptr;
  CUdeviceptr device_word = 0;
  uint32_t generation = 0;
  cudaStream_t user = nullptr, ours = nullptr;
  void *dev_a = nullptr, *dev_b = nullptr, *dev_c = nullptr, *dev_d = nullptr, *pinned_user = nullptr,
       *pinned_ours = nullptr;
  std::vector<uint8_t> pageable = std::vector<uint8_t>(kBytes);
};

// Queues `what` on the user stream behind the closed gate (pageable copies block the calling thread: run here in
// a thread of its own).
void queue_behind(Bed& bed, Behind what) {
  switch (what) {
    case kNothing: break;
    case kPageableD2H: cudaMemcpyAsync(bed.pageable.data(), bed.dev_a, kBytes, cudaMemcpyDeviceToHost, bed.user); break;
    case kPageableH2D: cudaMemcpyAsync(bed.dev_a, bed.pageable.data(), kBytes, cudaMemcpyHostToDevice, bed.user); break;
    case kPinnedD2H: cudaMemcpyAsync(bed.pinned_user, bed.dev_a, kBytes, cudaMemcpyDeviceToHost, bed.user); break;
    case kPinnedH2D: cudaMemcpyAsync(bed.dev_a, bed.pinned_user, kBytes, cudaMemcpyHostToDevice, bed.user); break;
    case kDeviceCopy: cudaMemcpyAsync(bed.dev_a, bed.dev_b, kBytes, cudaMemcpyDeviceToDevice, bed.user); break;
    case kKernel: touch_kernel<<<1, 32, 0, bed.user>>>(static_cast<float*>(bed.dev_a)); break;
    default: break;
  }
}

void queue_ours(Bed& bed, Ours what) {
  DeviceRuntime& rt = *cuda_device_runtime();
  switch (what) {
    case kLibD2H: rt.copy_async(bed.pinned_ours, bed.dev_c, kBytes, bed.ours); break;
    case kLibH2D: rt.copy_async(bed.dev_c, bed.pinned_ours, kBytes, bed.ours); break;
    case kLibD2D: rt.copy_async(bed.dev_c, bed.dev_d, kBytes, bed.ours); break;
    case kEngineD2H: cudaMemcpyAsync(bed.pinned_ours, bed.dev_c, kBytes, cudaMemcpyDeviceToHost, bed.ours); break;
    case kEngineH2D: cudaMemcpyAsync(bed.dev_c, bed.pinned_ours, kBytes, cudaMemcpyHostToDevice, bed.ours); break;
    case kEngineD2D: cudaMemcpyAsync(bed.dev_c, bed.dev_d, kBytes, cudaMemcpyDeviceToDevice, bed.ours); break;
    default: break;
  }
}

// 'y': our work finished with the gate closed; 'n': it did not (it finished after the gate opened); 'L': queuing
// it blocked the calling thread until then; 'E': a CUDA error.
char trial(Bed& bed, Behind behind, Ours ours) {
  const uint32_t value = ++bed.generation;
  if (bed.wait(reinterpret_cast<CUstream>(bed.user), bed.device_word, value, CU_STREAM_WAIT_VALUE_GEQ) != CUDA_SUCCESS)
    return 'E';
  std::thread user([&] { queue_behind(bed, behind); });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the user's work reaches the driver first
  std::atomic<int> queued{0};
  cudaEvent_t done = nullptr;
  cudaEventCreateWithFlags(&done, cudaEventDisableTiming);
  std::thread lib([&] {
    try {
      queue_ours(bed, ours);
    } catch (...) {
    }
    cudaEventRecord(done, bed.ours);
    queued.store(1);
  });
  const auto deadline = Clock::now() + kGateOpen;
  char result = 'n';
  while (Clock::now() < deadline) {
    if (queued.load() && cudaEventQuery(done) == cudaSuccess) {
      result = 'y';
      break;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  if (result == 'n' && !queued.load()) result = 'L';
  __atomic_store_n(bed.word, value, __ATOMIC_RELEASE);  // open the gate
  user.join();
  lib.join();
  if (cudaStreamSynchronize(bed.user) != cudaSuccess || cudaStreamSynchronize(bed.ours) != cudaSuccess) result = 'E';
  cudaEventDestroy(done);
  cudaGetLastError();
  return result;
}

}  // namespace

int main() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("no CUDA device: skipped\n");
    return 77;
  }
  cudaSetDevice(0);
  Bed bed;
  cudaDriverEntryPointQueryResult found{};
  void* fn = nullptr;
  if (cudaGetDriverEntryPointByVersion("cuStreamWaitValue32", &fn, 12000, cudaEnableDefault, &found) != cudaSuccess ||
      fn == nullptr) {
    std::printf("FAIL: no cuStreamWaitValue32\n");
    return 1;
  }
  bed.wait = reinterpret_cast<WaitValue32>(fn);
  DeviceRuntime& rt = *cuda_device_runtime();
  rt.prepare();
  bed.ours = static_cast<cudaStream_t>(rt.create_stream(0));  // as the device proxy makes it (kernels loaded)
  cudaStreamCreateWithFlags(&bed.user, cudaStreamNonBlocking);
  bed.word = static_cast<volatile uint32_t*>(rt.alloc_mapped(sizeof(uint32_t)));
  *bed.word = 0;
  void* device_word = nullptr;
  cudaHostGetDevicePointer(&device_word, const_cast<uint32_t*>(bed.word), 0);
  bed.device_word = reinterpret_cast<CUdeviceptr>(device_word);
  for (void** p : {&bed.dev_a, &bed.dev_b, &bed.dev_c, &bed.dev_d}) cudaMalloc(p, kBytes);
  bed.pinned_user = rt.alloc_mapped(kBytes);
  bed.pinned_ours = rt.alloc_mapped(kBytes);
  if (cudaDeviceSynchronize() != cudaSuccess) {
    std::printf("FAIL: setup\n");
    return 1;
  }

  int failures = 0;
  std::printf("%-14s", "behind gate");
  for (int o = 0; o < kOursCount; ++o) std::printf(" %12s", kOursNames[o]);
  std::printf("\n");
  for (int b = 0; b < kBehindCount; ++b) {
    std::printf("%-14s", kBehindNames[b]);
    for (int o = 0; o < kOursCount; ++o) {
      char r = trial(bed, static_cast<Behind>(b), static_cast<Ours>(o));
      std::printf(" %12c", r);
      if (o <= kLibD2D && r != 'y') ++failures;
    }
    std::printf("\n");
  }
  std::printf(
      "y: finished with the user's stream parked; n: only after it was released; L: queuing it blocked the "
      "thread until then; E: CUDA error\n");

  // The library's copies are exact at odd offsets and lengths (the kernel's word, 4-byte and byte paths).
  std::vector<uint8_t> src(kBytes), got(kBytes);
  for (size_t i = 0; i < kBytes; ++i) src[i] = static_cast<uint8_t>(i * 131 + 7);
  std::memcpy(bed.pinned_user, src.data(), kBytes);
  const size_t cases[][3] = {{0, 0, kBytes}, {3, 3, 100001}, {4, 8, 65539}, {1, 2, 4099}, {5, 0, 17}, {0, 0, 1}};
  for (const auto& c : cases) {
    cudaMemset(bed.dev_c, 0, kBytes);
    std::memset(bed.pinned_ours, 0, kBytes);
    rt.copy_async(static_cast<uint8_t*>(bed.dev_c) + c[1], static_cast<uint8_t*>(bed.pinned_user) + c[0], c[2],
                  bed.ours);
    rt.copy_async(static_cast<uint8_t*>(bed.dev_d) + c[0], static_cast<uint8_t*>(bed.dev_c) + c[1], c[2], bed.ours);
    rt.copy_async(static_cast<uint8_t*>(bed.pinned_ours) + c[1], static_cast<uint8_t*>(bed.dev_d) + c[0], c[2],
                  bed.ours);
    cudaStreamSynchronize(bed.ours);
    std::memcpy(got.data(), bed.pinned_ours, kBytes);
    bool exact = std::memcmp(got.data() + c[1], src.data() + c[0], c[2]) == 0;
    for (size_t i = 0; i < c[1] && exact; ++i) exact = got[i] == 0;
    for (size_t i = c[1] + c[2]; i < kBytes && exact; ++i) exact = got[i] == 0;
    if (!exact) {
      std::printf("FAIL: copy of %zu bytes from offset %zu to %zu differs\n", c[2], c[0], c[1]);
      ++failures;
    }
  }
  std::printf("%s\n",
              failures ? "stream gate: FAILED" : "stream gate: the library's copies never wait for a parked stream");
  return failures ? 1 : 0;
}

// The device runtime on CUDA: the runtime API, plus cuStreamWaitValue32 from the driver through
// cudaGetDriverEntryPointByVersion (so that libbagua never links libcuda and loads on machines without a driver).
// Every call runs in relaxed stream-capture mode, so that a user's global-mode capture on another thread or
// stream does not make it fail.
#include <cuda.h>
#include <cuda_runtime_api.h>

#include <link.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "base/deadline.h"
#include "base/error.h"
#include "base/logging.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/device_runtime.h"
#include "kernels/dtype.h"

namespace bagua {

namespace {

[[noreturn]] void cuda_fail(cudaError_t err, const char* what) {
  cudaGetLastError();
  fail(BAGUA_ERR_CUDA, "{}: {} ({})", what, cudaGetErrorString(err), cudaGetErrorName(err));
}

void check(cudaError_t err, const char* what) {
  if (err != cudaSuccess) cuda_fail(err, what);
}

// A call whose failure changes nothing here (a destroy, a free, a restore): its error is not left pending, where
// the next launch check would report it as its own.
void ignore(cudaError_t err) {
  if (err != cudaSuccess) cudaGetLastError();
}

// A driver function by name, through the runtime (libbagua never links libcuda); nullptr when missing.
void* driver_entry(const char* symbol) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
  if (cudaGetDriverEntryPointByVersion(symbol, &fn, 12000, cudaEnableDefault, &found) != cudaSuccess ||
      found != cudaDriverEntryPointSuccess)
    fn = nullptr;
  cudaGetLastError();
  return fn;
}

// The GPU's nanosecond clock (%globaltimer) into a word of mapped host memory.
__global__ void write_timestamp_kernel(unsigned long long* word) {
  unsigned long long now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  *word = now;
}

// Relaxed capture mode for the duration of one call, restored after.
class RelaxedCapture {
 public:
  RelaxedCapture() { cudaThreadExchangeStreamCaptureMode(&mode_); }
  ~RelaxedCapture() { cudaThreadExchangeStreamCaptureMode(&mode_); }

 private:
  cudaStreamCaptureMode mode_ = cudaStreamCaptureModeRelaxed;
};

// The calling thread's current device set to `device` for the duration of one call, restored after: the context
// that was current (the driver's own record, so a thread that had none is left with none, and a user's own
// context comes back as it was). Restoring a context-less thread's "device 0" would create a context on GPU 0,
// hundreds of MiB, in every process of a job that sees all GPUs.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    if (device < 0) return;
    using CtxGetCurrent = CUresult (*)(CUcontext*);
    static const auto get_current = reinterpret_cast<CtxGetCurrent>(driver_entry("cuCtxGetCurrent"));
    if (get_current == nullptr || get_current(&saved_context_) != CUDA_SUCCESS) saved_context_ = nullptr;
    int current = -1;
    if (cudaGetDevice(&current) != cudaSuccess) {
      cudaGetLastError();
      current = -1;
    }
    if (saved_context_ != nullptr && current == device) return;
    check(cudaSetDevice(device), "cudaSetDevice");
    restore_ = true;
    saved_device_ = current;
  }
  ~DeviceGuard() {
    if (!restore_) return;
    using CtxSetCurrent = CUresult (*)(CUcontext);
    static const auto set_current = reinterpret_cast<CtxSetCurrent>(driver_entry("cuCtxSetCurrent"));
    if (set_current != nullptr)
      set_current(saved_context_);
    else if (saved_device_ >= 0)
      ignore(cudaSetDevice(saved_device_));
  }

 private:
  CUcontext saved_context_ = nullptr;
  int saved_device_ = -1;
  bool restore_ = false;
};

int device_of_stream(DeviceStream stream) {
  int device = 0;
  if (stream == nullptr || stream == reinterpret_cast<DeviceStream>(0x1) ||
      stream == reinterpret_cast<DeviceStream>(0x2))
    check(cudaGetDevice(&device), "cudaGetDevice");
  else
    check(cudaStreamGetDevice(static_cast<cudaStream_t>(stream), &device), "cudaStreamGetDevice");
  return device;
}

// The library's stream-ordered pools, one per device (scratch of calls that compute on the caller's stream, lpdec's,
// a qstate's and asynchronous averaging's device blocks). Unlike the device's default pool they never make an
// allocation wait for a free on another stream (cudaMemPoolReuseAllowInternalDependencies = 0, enabled by default):
// a call's scratch must not be ordered behind another stream that waits at one of the library's gates. They reuse
// memory whose free has completed, or was freed on the same stream, as the default pool does. A pool is made with
// the device's kernels, before any of the library's gates parks a stream.
class LibraryPools {
 public:
  // Null where no pool could be made: the default pool then.
  cudaMemPool_t get(int device) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (auto it = pools_.find(device); it != pools_.end()) return it->second;
    cudaMemPoolProps props{};
    props.allocType = cudaMemAllocationTypePinned;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = device;
    cudaMemPool_t pool = nullptr;
    int no = 0;
    if (cudaMemPoolCreate(&pool, &props) != cudaSuccess) {
      cudaGetLastError();
      pool = nullptr;
    } else if (cudaMemPoolSetAttribute(pool, cudaMemPoolReuseAllowInternalDependencies, &no) != cudaSuccess) {
      cudaGetLastError();
      ignore(cudaMemPoolDestroy(pool));
      pool = nullptr;
    }
    if (pool == nullptr) BAGUA_DEBUG("device {}: no memory pool of the library's own; using the default pool", device);
    pools_[device] = pool;
    return pool;
  }
  // After a failure other than running out of memory (a reset device, say): the next call makes a new one.
  void forget(int device, cudaMemPool_t pool) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (auto it = pools_.find(device); it != pools_.end() && it->second == pool) pools_.erase(it);
  }

 private:
  std::mutex mutex_;
  std::map<int, cudaMemPool_t> pools_;  // kept for the process
};

LibraryPools& library_pools() {
  static LibraryPools* pools = new LibraryPools;  // never destroyed: allocations may come during exit
  return *pools;
}

bool event_done(cudaEvent_t event, const char* what) {
  RelaxedCapture relaxed;
  cudaError_t err = cudaEventQuery(event);
  if (err == cudaErrorNotReady) {
    cudaGetLastError();
    return false;
  }
  check(err, what);
  return true;
}

class CudaEvent final : public DeviceEvent {
 public:
  CudaEvent(cudaEvent_t event, int device) : event_(event), device_(device) {}
  ~CudaEvent() override {
    RelaxedCapture relaxed;
    ignore(cudaEventDestroy(event_));
  }
  bool done() override {
    DeviceGuard on(device_);
    return event_done(event_, "cudaEventQuery");
  }
  cudaEvent_t handle() const { return event_; }

 private:
  cudaEvent_t event_;
  int device_;
};

using WaitValue32 = CUresult (*)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);
using PointerGetAttributes = CUresult (*)(unsigned int, CUpointer_attribute*, void**, CUdeviceptr);

// Whether this process has loaded the CUDA driver (someone initialized CUDA). Until then no pointer can be device
// memory, and asking cudart would start CUDA: about 120 us without a driver, and after it a forked child can no
// longer use CUDA. Once loaded it stays loaded. The loaded objects are listed without touching the file system
// (dlopen with RTLD_NOLOAD still searches the library path: hundreds of failed opens, up to a millisecond, where no
// driver is installed), and a "not loaded" answer is reused for 1 ms or one tick of the coarse clock (up to 10 ms):
// device memory needs a CUDA context, which takes far longer than that to create after the driver is loaded.
bool driver_in_process() {
  auto is_driver = [](struct dl_phdr_info* info, size_t, void*) -> int {
    return info->dlpi_name != nullptr && std::strstr(info->dlpi_name, "libcuda.so") != nullptr ? 1 : 0;
  };
  return dl_iterate_phdr(is_driver, nullptr) != 0;
}

bool driver_loaded() {
  static std::atomic<bool> loaded{false};
  static std::atomic<int64_t> asked_at_ns{INT64_MIN / 2};
  if (loaded.load(std::memory_order_relaxed)) return true;
  // The coarse clock: a few ns, where this runs twice in every call.
  const int64_t now = CoarseClock::now().time_since_epoch().count();
  if (now - asked_at_ns.load(std::memory_order_relaxed) < 1000000) return false;
  bool in_process = driver_in_process();
  asked_at_ns.store(now, std::memory_order_relaxed);
  if (!in_process) return false;
  loaded.store(true, std::memory_order_relaxed);
  return true;
}

class CudaRuntime final : public DeviceRuntime {
 public:
  const char* name() const override { return "CUDA"; }
  bool usable() override { return cuda_device_count() > 0; }
  // The process already uses CUDA: start this library's runtime now rather than in the first call, and load the
  // kernels the device path launches (with lazy loading, a first launch while a user kernel spins can deadlock).
  void prepare() override {
    if (driver_loaded() && cuda_device_count() > 0) {
      RelaxedCapture relaxed;
      int device = 0;
      if (cudaGetDevice(&device) == cudaSuccess)
        load_kernels_once(device);
      else
        cudaGetLastError();
    }
  }

  void load_kernels(int device) override {
    if (device >= 0 && device < 64 && (loaded_mask_.load(std::memory_order_acquire) >> device & 1)) return;
    RelaxedCapture relaxed;
    DeviceGuard on(device);
    load_kernels_once(device);
  }

  MemoryType query_memory_type(const void* ptr, int* device) override {
    if (device) *device = -1;
    if (!driver_loaded()) return MemoryType::kHost;
    RelaxedCapture relaxed;
    cudaPointerAttributes attrs{};
    if (cudaPointerGetAttributes(&attrs, ptr) != cudaSuccess) {
      cudaGetLastError();
      return MemoryType::kHost;
    }
    if (attrs.type != cudaMemoryTypeDevice && attrs.type != cudaMemoryTypeManaged) return MemoryType::kHost;
    if (device) *device = attrs.device;
    return attrs.type == cudaMemoryTypeDevice ? MemoryType::kDevice : MemoryType::kManaged;
  }
  int stream_device(DeviceStream stream) override {
    RelaxedCapture relaxed;
    return device_of_stream(stream);
  }
  bool stream_capturing(DeviceStream stream) override {
    RelaxedCapture relaxed;
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    cudaError_t err = cudaStreamIsCapturing(static_cast<cudaStream_t>(stream), &status);
    if (err == cudaErrorStreamCaptureImplicit) {  // the legacy stream while a blocking stream is captured
      cudaGetLastError();
      return true;
    }
    check(err, "cudaStreamIsCapturing");
    return status != cudaStreamCaptureStatusNone;
  }
  bool stream_blocking(DeviceStream stream) override {
    if (stream == nullptr || stream == reinterpret_cast<DeviceStream>(0x1) ||
        stream == reinterpret_cast<DeviceStream>(0x2))
      return true;
    RelaxedCapture relaxed;
    unsigned int flags = 0;
    check(cudaStreamGetFlags(static_cast<cudaStream_t>(stream), &flags), "cudaStreamGetFlags");
    return (flags & cudaStreamNonBlocking) == 0;
  }
  void wait_user_event(DeviceStream stream, void* event) override {
    RelaxedCapture relaxed;
    DeviceGuard on(device_of_stream(stream));
    check(cudaStreamWaitEvent(static_cast<cudaStream_t>(stream), static_cast<cudaEvent_t>(event), 0),
          "cudaStreamWaitEvent (the caller's event)");
  }
  void wait_event(DeviceStream stream, DeviceEvent& event) override {
    RelaxedCapture relaxed;
    DeviceGuard on(device_of_stream(stream));
    check(cudaStreamWaitEvent(static_cast<cudaStream_t>(stream), static_cast<CudaEvent&>(event).handle(), 0),
          "cudaStreamWaitEvent");
  }
  std::unique_ptr<DeviceEvent> record(DeviceStream stream) override {
    RelaxedCapture relaxed;
    int device = device_of_stream(stream);
    DeviceGuard on(device);
    cudaEvent_t event;
    check(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), "cudaEventCreate");
    auto owned = std::make_unique<CudaEvent>(event, device);
    check(cudaEventRecord(event, static_cast<cudaStream_t>(stream)), "cudaEventRecord");
    return owned;
  }
  void wait_value(DeviceStream stream, const volatile uint32_t* word, uint32_t value) override {
    RelaxedCapture relaxed;
    DeviceGuard on(device_of_stream(stream));
    WaitValue32 wait = wait_value_entry();
    void* device_word = nullptr;
    check(cudaHostGetDevicePointer(&device_word, const_cast<uint32_t*>(word), 0), "cudaHostGetDevicePointer");
    CUresult res = wait(static_cast<CUstream>(stream), reinterpret_cast<CUdeviceptr>(device_word), value,
                        CU_STREAM_WAIT_VALUE_GEQ);
    if (res != CUDA_SUCCESS) fail(BAGUA_ERR_CUDA, "cuStreamWaitValue32 failed with CUresult {}", static_cast<int>(res));
  }
  void write_value(DeviceStream stream, volatile uint32_t* word, uint32_t value) override {
    RelaxedCapture relaxed;
    DeviceGuard on(device_of_stream(stream));
    WaitValue32 write = write_value_entry();
    void* device_word = nullptr;
    check(cudaHostGetDevicePointer(&device_word, const_cast<uint32_t*>(word), 0), "cudaHostGetDevicePointer");
    CUresult res = write(static_cast<CUstream>(stream), reinterpret_cast<CUdeviceptr>(device_word), value, 0);
    if (res != CUDA_SUCCESS)
      fail(BAGUA_ERR_CUDA, "cuStreamWriteValue32 failed with CUresult {}", static_cast<int>(res));
  }
  void write_timestamp(DeviceStream stream, uint64_t* word) override {
    RelaxedCapture relaxed;
    DeviceGuard on(device_of_stream(stream));
    write_timestamp_kernel<<<1, 1, 0, static_cast<cudaStream_t>(stream)>>>(reinterpret_cast<unsigned long long*>(word));
    cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) fail(BAGUA_ERR_CUDA, "the timestamp kernel: {}", cudaGetErrorString(err));
  }
  void kernel_copy_async(void* dst, const void* src, size_t bytes, DeviceStream stream) override {
    RelaxedCapture relaxed;
    DeviceGuard on(device_of_stream(stream));
    cuda::copy_bytes(dst, src, bytes, stream);
  }
  void copy_async(void* dst, const void* src, size_t bytes, DeviceStream stream) override {
    RelaxedCapture relaxed;
    DeviceGuard on(device_of_stream(stream));
    check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, static_cast<cudaStream_t>(stream)), "cudaMemcpyAsync");
  }
  DeviceStream create_stream(int device) override {
    RelaxedCapture relaxed;
    DeviceGuard on(device);
    load_kernels_once(device);
    cudaStream_t stream;
    check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
    return stream;
  }
  void destroy_stream(DeviceStream stream) override {
    RelaxedCapture relaxed;
    ignore(cudaStreamDestroy(static_cast<cudaStream_t>(stream)));
  }
  void* alloc_mapped(size_t bytes) override {
    RelaxedCapture relaxed;
    void* p = nullptr;
    cudaError_t err = cudaHostAlloc(&p, bytes ? bytes : 1, cudaHostAllocMapped | cudaHostAllocPortable);
    if (err == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      return nullptr;
    }
    check(err, "cudaHostAlloc");
    return p;
  }
  void free_mapped(void* ptr) override {
    RelaxedCapture relaxed;
    if (ptr) ignore(cudaFreeHost(ptr));
  }
  void* alloc_device(size_t bytes, int device) override {
    RelaxedCapture relaxed;
    DeviceGuard on(device);
    void* p = nullptr;
    cudaError_t err = cudaMalloc(&p, bytes ? bytes : 1);
    if (err == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      return nullptr;
    }
    check(err, "cudaMalloc");
    return p;
  }
  void free_device(void* ptr) override {
    RelaxedCapture relaxed;
    if (ptr) ignore(cudaFree(ptr));
  }
  void* alloc_device_async(size_t bytes, DeviceStream stream) override {
    RelaxedCapture relaxed;
    const int device = device_of_stream(stream);
    DeviceGuard on(device);
    void* p = nullptr;
    const size_t size = bytes ? bytes : 1;
    if (const cudaMemPool_t pool = library_pools().get(device)) {
      const cudaError_t err = cudaMallocFromPoolAsync(&p, size, pool, static_cast<cudaStream_t>(stream));
      if (err == cudaSuccess) return p;
      // Out of memory in the library's pool: the default pool may hold free memory (a user's cudaMallocAsync,
      // PyTorch's cudaMallocAsync backend) that this pool cannot take. Any other failure: a new pool next time.
      cudaGetLastError();
      if (err != cudaErrorMemoryAllocation) library_pools().forget(device, pool);
      BAGUA_DEBUG("device {}: cudaMallocFromPoolAsync of {} bytes: {}; trying the default pool", device, size,
                  cudaGetErrorString(err));
      p = nullptr;
    }
    const cudaError_t err = cudaMallocAsync(&p, size, static_cast<cudaStream_t>(stream));
    if (err == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      return nullptr;
    }
    check(err, "cudaMallocAsync");
    return p;
  }
  void free_device_async(void* ptr, DeviceStream stream) override {
    RelaxedCapture relaxed;
    DeviceGuard on(device_of_stream(stream));
    if (ptr) ignore(cudaFreeAsync(ptr, static_cast<cudaStream_t>(stream)));
  }
  bool allocation(const void* ptr, DeviceAllocation* out) override {
    if (!driver_loaded()) return false;
    RelaxedCapture relaxed;
    static PointerGetAttributes get = reinterpret_cast<PointerGetAttributes>(driver_entry("cuPointerGetAttributes"));
    if (get == nullptr) return false;
    CUdeviceptr start = 0;
    size_t size = 0;
    unsigned long long id = 0;
    int ipc_capable = 0;  // a boolean: the driver writes its low byte
    CUmemorytype type = static_cast<CUmemorytype>(0);
    CUpointer_attribute which[] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
                                   CU_POINTER_ATTRIBUTE_RANGE_SIZE, CU_POINTER_ATTRIBUTE_BUFFER_ID,
                                   CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE};
    void* data[] = {&type, &start, &size, &id, &ipc_capable};
    if (get(5, which, data, reinterpret_cast<CUdeviceptr>(ptr)) != CUDA_SUCCESS || type != CU_MEMORYTYPE_DEVICE)
      return false;
    *out = DeviceAllocation{static_cast<uintptr_t>(start), size, id, (ipc_capable & 0xff) != 0};
    return true;
  }
  void export_ipc(uintptr_t base, IpcHandle* out) override {
    RelaxedCapture relaxed;
    static_assert(sizeof(cudaIpcMemHandle_t) <= sizeof(IpcHandle));
    cudaIpcMemHandle_t handle;
    check(cudaIpcGetMemHandle(&handle, reinterpret_cast<void*>(base)), "cudaIpcGetMemHandle");
    std::memset(out->bytes, 0, sizeof(out->bytes));
    std::memcpy(out->bytes, &handle, sizeof(handle));
  }
  void* open_ipc(const IpcHandle& handle, int device) override {
    RelaxedCapture relaxed;
    DeviceGuard on(device);
    cudaIpcMemHandle_t h;
    std::memcpy(&h, handle.bytes, sizeof(h));
    void* mapped = nullptr;
    check(cudaIpcOpenMemHandle(&mapped, h, cudaIpcMemLazyEnablePeerAccess), "cudaIpcOpenMemHandle");
    return mapped;
  }
  void close_ipc(void* mapped, int device) override {
    RelaxedCapture relaxed;
    DeviceGuard on(device);
    cudaError_t err = cudaIpcCloseMemHandle(mapped);
    if (err != cudaSuccess) {
      cudaGetLastError();
      BAGUA_WARN("cudaIpcCloseMemHandle: {}", cudaGetErrorString(err));
    }
  }
  GpuId gpu_id(int device) override {
    RelaxedCapture relaxed;
    std::lock_guard<std::mutex> lock(ids_mutex_);
    auto it = ids_.find(device);
    if (it != ids_.end()) return it->second;
    cudaDeviceProp props{};
    check(cudaGetDeviceProperties(&props, device), "cudaGetDeviceProperties");
    GpuId id{};
    static_assert(sizeof(props.uuid) == sizeof(id.bytes));
    std::memcpy(id.bytes, &props.uuid, sizeof(id.bytes));
    ids_[device] = id;
    return id;
  }
  // Asked on every in-host allreduce: computed once per device (peer access does not change while the process runs).
  std::vector<GpuId> reachable_gpus(int device) override {
    {
      std::lock_guard<std::mutex> lock(ids_mutex_);
      auto it = reachable_.find(device);
      if (it != reachable_.end()) return it->second;
    }
    std::vector<GpuId> out{gpu_id(device)};
    const int count = cuda_device_count();
    for (int other = 0; other < count; ++other) {
      if (other == device) continue;
      int can = 0;
      {
        RelaxedCapture relaxed;
        if (cudaDeviceCanAccessPeer(&can, device, other) != cudaSuccess) {
          cudaGetLastError();
          can = 0;
        }
      }
      if (can) out.push_back(gpu_id(other));
    }
    std::lock_guard<std::mutex> lock(ids_mutex_);
    reachable_[device] = out;
    return out;
  }
  void reduce_async(void* dst, const void* a, const void* b, size_t count, bagua_datatype_t dtype, bagua_redop_t op,
                    DeviceStream stream) override {
    RelaxedCapture relaxed;
    DeviceGuard on(device_of_stream(stream));
    cuda::reduce_from(dst, a, b, count, dtype, op, stream);
  }
  void divide_async(void* dst, size_t count, bagua_datatype_t dtype, int divisor, DeviceStream stream) override {
    RelaxedCapture relaxed;
    DeviceGuard on(device_of_stream(stream));
    cuda::divide_by(dst, count, dtype, divisor, stream);
  }
  void reduce_spans_async(const std::vector<void*>& dsts, const std::vector<const void*>& srcs, size_t count,
                          bagua_datatype_t dtype, bagua_redop_t op, int divisor, DeviceStream stream) override {
    RelaxedCapture relaxed;
    DeviceGuard on(device_of_stream(stream));
    cuda::reduce_spans(dsts.data(), static_cast<int>(dsts.size()), srcs.data(), static_cast<int>(srcs.size()), count,
                       dtype, op, divisor, stream);
  }
  void late_copy_async(LateSpan dst, LateSpan src, size_t bytes, DeviceStream stream) override {
    RelaxedCapture relaxed;
    DeviceGuard on(device_of_stream(stream));
    cuda::late_copy_bytes(dst, src, bytes, stream);
  }
  void late_reduce_spans_async(const std::vector<LateSpan>& dsts, const std::vector<LateSpan>& srcs, size_t count,
                               bagua_datatype_t dtype, bagua_redop_t op, int divisor, DeviceStream stream) override {
    RelaxedCapture relaxed;
    DeviceGuard on(device_of_stream(stream));
    cuda::late_reduce_spans(dsts.data(), static_cast<int>(dsts.size()), srcs.data(), static_cast<int>(srcs.size()),
                            count, dtype, op, divisor, stream);
  }
  void average_correct_async(void* x, const void* sum, const void* snapshot, size_t count, bagua_datatype_t dtype,
                             int n, DeviceStream stream) override {
    RelaxedCapture relaxed;
    DeviceGuard on(device_of_stream(stream));
    cuda::average_correct(x, sum, snapshot, count, dtype, n, stream);
  }
  void compress_async(const CompressionSpec& spec, const float* x, size_t count, float* error, const RoundingKey& key,
                      uint8_t* out, DeviceStream stream) override {
    RelaxedCapture relaxed;
    DeviceGuard on(device_of_stream(stream));
    cuda::compress_floats(spec, x, count, error, key, out, stream);
  }
  void decompress_async(const CompressionSpec& spec, const uint8_t* in, size_t count, float* out, bool accumulate,
                        DeviceStream stream) override {
    RelaxedCapture relaxed;
    DeviceGuard on(device_of_stream(stream));
    cuda::decompress_floats(spec, in, count, out, accumulate, stream);
  }
  void gossip_difference_async(float* diff, const float* x, const float* self, const float* const* replicas,
                               const float* weights, int nreplicas, float self_weight, size_t count,
                               DeviceStream stream) override {
    RelaxedCapture relaxed;
    DeviceGuard on(device_of_stream(stream));
    cuda::gossip_difference(diff, x, self, replicas, weights, nreplicas, self_weight, count, stream);
  }
  void convert_async(void* dst, bagua_datatype_t dst_type, const void* src, bagua_datatype_t src_type, size_t count,
                     DeviceStream stream) override {
    RelaxedCapture relaxed;
    DeviceGuard on(device_of_stream(stream));
    if (dst_type == src_type)
      copy_async(dst, src, count * datatype_size(dst_type), stream);
    else if (src_type == BAGUA_FLOAT32)
      cuda::cast_from_float(static_cast<const float*>(src), count, dst, dst_type, stream);
    else
      cuda::cast_to_float(src, src_type, count, static_cast<float*>(dst), stream);
  }
  void synchronize(DeviceStream stream, int timeout_ms) override {
    RelaxedCapture relaxed;
    auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    for (;;) {
      cudaError_t err = cudaStreamQuery(static_cast<cudaStream_t>(stream));
      if (err == cudaSuccess) return;
      if (err != cudaErrorNotReady) cuda_fail(err, "cudaStreamQuery");
      cudaGetLastError();
      if (std::chrono::steady_clock::now() > deadline)
        fail(BAGUA_ERR_TIMEOUT, "CUDA stream did not finish within {} ms", timeout_ms);
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }
  void set_device(int device) override {
    RelaxedCapture relaxed;
    check(cudaSetDevice(device), "cudaSetDevice");
  }
  void on_device(int device, const std::function<void()>& work) override {
    DeviceGuard on(device);
    work();
  }
  void enter_library_thread() override {
    cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    cudaThreadExchangeStreamCaptureMode(&mode);
  }

 private:
  WaitValue32 wait_value_entry() {
    std::call_once(wait_once_,
                   [this] { wait_value_ = reinterpret_cast<WaitValue32>(driver_entry("cuStreamWaitValue32")); });
    if (wait_value_ == nullptr)
      fail(BAGUA_ERR_NOT_SUPPORTED, "this CUDA driver has no cuStreamWaitValue32, which device calls need");
    return wait_value_;
  }
  WaitValue32 write_value_entry() {  // (the same signature)
    std::call_once(write_once_,
                   [this] { write_value_ = reinterpret_cast<WaitValue32>(driver_entry("cuStreamWriteValue32")); });
    if (write_value_ == nullptr)
      fail(BAGUA_ERR_NOT_SUPPORTED, "this CUDA driver has no cuStreamWriteValue32, which device calls need");
    return write_value_;
  }
  // The kernels of the device path on `device` (its current context), loaded before any call uses its streams.
  void load_kernels_once(int device) {
    std::lock_guard<std::mutex> lock(loaded_mutex_);
    if (loaded_.count(device) != 0) return;
    cuda::load_kernels();
    cudaFuncAttributes attrs;
    cudaError_t err = cudaFuncGetAttributes(&attrs, write_timestamp_kernel);
    if (err != cudaSuccess) fail(BAGUA_ERR_CUDA, "loading the timestamp kernel: {}", cudaGetErrorString(err));
    library_pools().get(device);  // made now, like the kernels, before a stream is parked
    loaded_.insert(device);       // (only once loaded: a failure is retried by the next call)
    if (device >= 0 && device < 64) loaded_mask_.fetch_or(uint64_t{1} << device, std::memory_order_release);
  }
  std::mutex loaded_mutex_;
  std::set<int> loaded_;
  std::atomic<uint64_t> loaded_mask_{0};  // devices below 64 in loaded_, read without the lock
  std::mutex ids_mutex_;
  std::map<int, GpuId> ids_;
  std::map<int, std::vector<GpuId>> reachable_;
  std::once_flag wait_once_, write_once_;
  WaitValue32 wait_value_ = nullptr, write_value_ = nullptr;
};

}  // namespace

DeviceRuntime* cuda_device_runtime() {
  static CudaRuntime runtime;
  return &runtime;
}

bool cuda_built() { return true; }

int cuda_device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return count;
}

}  // namespace bagua

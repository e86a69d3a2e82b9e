// Which device runtime a process uses, and pointer detection through it.
#include "kernels/device_runtime.h"

#include <cstring>

#include "base/env.h"
#include "base/error.h"

namespace bagua {

DeviceRuntime* make_standin_runtime();  // device_runtime_standin.cc

namespace {

// No CUDA build, no driver or no device: every pointer is host memory and nothing else is offered.
class HostOnlyRuntime final : public DeviceRuntime {
 public:
  const char* name() const override { return "none"; }
  bool usable() override { return false; }
  MemoryType query_memory_type(const void*, int* device) override {
    if (device) *device = -1;
    return MemoryType::kHost;
  }
  int stream_device(DeviceStream) override { unavailable(); }
  bool stream_capturing(DeviceStream) override { unavailable(); }
  bool stream_blocking(DeviceStream) override { unavailable(); }
  std::unique_ptr<DeviceEvent> record(DeviceStream) override { unavailable(); }
  void wait_user_event(DeviceStream, void*) override { unavailable(); }
  void wait_event(DeviceStream, DeviceEvent&) override { unavailable(); }
  void wait_value(DeviceStream, const volatile uint32_t*, uint32_t) override { unavailable(); }
  void write_value(DeviceStream, volatile uint32_t*, uint32_t) override { unavailable(); }
  void write_timestamp(DeviceStream, uint64_t*) override { unavailable(); }
  void copy_async(void*, const void*, size_t, DeviceStream) override { unavailable(); }
  void kernel_copy_async(void*, const void*, size_t, DeviceStream) override { unavailable(); }
  DeviceStream create_stream(int) override { unavailable(); }
  void destroy_stream(DeviceStream) override {}
  void* alloc_mapped(size_t) override { unavailable(); }
  void free_mapped(void*) override {}
  void* alloc_device(size_t, int) override { unavailable(); }
  void free_device(void*) override {}
  void* alloc_device_async(size_t, DeviceStream) override { unavailable(); }
  void free_device_async(void*, DeviceStream) override {}
  bool allocation(const void*, DeviceAllocation*) override { return false; }
  void export_ipc(uintptr_t, IpcHandle*) override { unavailable(); }
  void* open_ipc(const IpcHandle&, int) override { unavailable(); }
  void close_ipc(void*, int) override {}
  GpuId gpu_id(int) override { unavailable(); }
  std::vector<GpuId> reachable_gpus(int) override { unavailable(); }
  void reduce_async(void*, const void*, const void*, size_t, bagua_datatype_t, bagua_redop_t, DeviceStream) override {
    unavailable();
  }
  void divide_async(void*, size_t, bagua_datatype_t, int, DeviceStream) override { unavailable(); }
  void reduce_spans_async(const std::vector<void*>&, const std::vector<const void*>&, size_t, bagua_datatype_t,
                          bagua_redop_t, int, DeviceStream) override {
    unavailable();
  }
  void late_copy_async(LateSpan, LateSpan, size_t, DeviceStream) override { unavailable(); }
  void late_reduce_spans_async(const std::vector<LateSpan>&, const std::vector<LateSpan>&, size_t, bagua_datatype_t,
                               bagua_redop_t, int, DeviceStream) override {
    unavailable();
  }
  void average_correct_async(void*, const void*, const void*, size_t, bagua_datatype_t, int, DeviceStream) override {
    unavailable();
  }
  void compress_async(const CompressionSpec&, const float*, size_t, float*, const RoundingKey&, uint8_t*,
                      DeviceStream) override {
    unavailable();
  }
  void decompress_async(const CompressionSpec&, const uint8_t*, size_t, float*, bool, DeviceStream) override {
    unavailable();
  }
  void gossip_difference_async(float*, const float*, const float*, const float* const*, const float*, int, float,
                               size_t, DeviceStream) override {
    unavailable();
  }
  void convert_async(void*, bagua_datatype_t, const void*, bagua_datatype_t, size_t, DeviceStream) override {
    unavailable();
  }
  void synchronize(DeviceStream, int) override { unavailable(); }
  void set_device(int) override {}
  void on_device(int, const std::function<void()>& work) override { work(); }
  void enter_library_thread() override {}

 private:
  [[noreturn]] static void unavailable() { fail(BAGUA_ERR_NOT_SUPPORTED, "no CUDA device is available"); }
};

DeviceRuntime* choose_runtime() {
  const char* standin = env_get_nonempty("BAGUA_DEVICE_STANDIN");
  if (standin != nullptr && std::strcmp(standin, "0") != 0) return make_standin_runtime();
  if (DeviceRuntime* cuda = cuda_device_runtime()) return cuda;
  static HostOnlyRuntime host_only;
  return &host_only;
}

}  // namespace

bool GpuId::operator==(const GpuId& other) const { return std::memcmp(bytes, other.bytes, sizeof(bytes)) == 0; }

DeviceRuntime& device_runtime() {
  static DeviceRuntime* runtime = choose_runtime();
  return *runtime;
}

namespace {
thread_local bool t_host_memory_only = false;
}  // namespace

HostMemoryOnlyThread::HostMemoryOnlyThread() : was_(t_host_memory_only) { t_host_memory_only = true; }
HostMemoryOnlyThread::~HostMemoryOnlyThread() { t_host_memory_only = was_; }
bool HostMemoryOnlyThread::active() { return t_host_memory_only; }

MemoryType DeviceRuntime::memory_type(const void* ptr, int* device) {
  if (t_host_memory_only) {
    check_host_only(ptr);
    if (device) *device = -1;
    return MemoryType::kHost;
  }
  return query_memory_type(ptr, device);
}

void DeviceRuntime::copy_from_host_to_any(void* dst, const void* src, size_t bytes, int timeout_ms) {
  int device = -1;
  if (bytes == 0) return;
  if (memory_type(dst, &device) == MemoryType::kHost) {
    std::memcpy(dst, src, bytes);
    return;
  }
  on_device(device, [&] {
    copy_async(dst, src, bytes, nullptr);
    synchronize(nullptr, timeout_ms);
  });
}

MemoryType detect_memory_type(const void* ptr) {
  if (ptr == nullptr) return MemoryType::kHost;
  return device_runtime().memory_type(ptr, nullptr);
}

}  // namespace bagua

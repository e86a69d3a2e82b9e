// The few CUDA runtime calls that the device data path makes, behind one narrow interface (docs/cuda.md):
// pointer queries, events, a stream wait on a host-mapped word, async copies, internal streams and the
// library's own memory. Two implementations: CUDA (kernels/cuda/device_runtime_cuda.cu) and a host stand-in
// (device_runtime_standin.cc) in which "device memory" is registered host memory and threads stand in for
// streams, so that CI runs the device path's protocol without a GPU (BAGUA_DEVICE_STANDIN=1).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "bagua/bagua.h"
#include "kernels/late_span.h"
#include "kernels/memory_type.h"
#include "kernels/quantize.h"

namespace bagua {

// A cudaStream_t; nullptr is CUDA's legacy default stream.
using DeviceStream = void*;

// Work recorded on a stream; done() once everything before it on that stream has finished.
class DeviceEvent {
 public:
  virtual ~DeviceEvent() = default;
  virtual bool done() = 0;  // throws Error(BAGUA_ERR_CUDA) when the stream failed
};

// The allocation a device pointer lies in. buffer_id differs between two allocations of a process, also when a
// freed one's address is reused (CUDA's CU_POINTER_ATTRIBUTE_BUFFER_ID). exportable: peers of the host can map it
// through IPC (cudaMalloc memory can; cudaMallocAsync pools and cuMemCreate memory cannot).
struct DeviceAllocation {
  uintptr_t base = 0;
  size_t bytes = 0;
  uint64_t buffer_id = 0;
  bool exportable = false;
};

// An opaque IPC handle (a cudaIpcMemHandle_t, or the stand-in's own).
struct IpcHandle {
  uint8_t bytes[64];
};

// A GPU's identity, the same in every process whatever CUDA_VISIBLE_DEVICES says (its UUID).
struct GpuId {
  uint8_t bytes[16];
  bool operator==(const GpuId& other) const;
};

// A library thread that passes only host memory (its own staging and state) to the library's calls: while one is in
// scope on this thread, memory detection answers host without a driver call, which a user thread waiting inside the
// driver for a stream that this thread must release could block (docs/cuda.md, "What a parked stream blocks").
class HostMemoryOnlyThread {
 public:
  HostMemoryOnlyThread();
  ~HostMemoryOnlyThread();
  HostMemoryOnlyThread(const HostMemoryOnlyThread&) = delete;
  HostMemoryOnlyThread& operator=(const HostMemoryOnlyThread&) = delete;
  static bool active();

 private:
  bool was_;
};

class DeviceRuntime {
 protected:
  virtual MemoryType query_memory_type(const void* ptr, int* device) = 0;
  // Inside a HostMemoryOnlyThread scope, where the runtime can tell without a driver call: throws INTERNAL when ptr
  // is device memory after all (the stand-in does; CUDA cannot cheaply).
  virtual void check_host_only(const void*) {}

 public:
  virtual ~DeviceRuntime() = default;
  virtual const char* name() const = 0;
  // Whether device memory can exist here (for tests and tools; with CUDA this initializes the driver).
  virtual bool usable() = 0;
  // Called at communicator init: gets ready without starting CUDA in a process that has not (see the CUDA one).
  virtual void prepare() {}
  // Loads the device path's kernels into `device`'s context unless they are (cheap then). Called by every device
  // call before it parks a stream: CUDA's lazy loading of a kernel at its first launch may wait for the whole
  // context, parked streams included.
  virtual void load_kernels(int /*device*/) {}
  // Where ptr lives and, for device or managed memory, on which device (the pointer's, not the current one). On a
  // thread inside a HostMemoryOnlyThread scope: host, without asking the runtime.
  MemoryType memory_type(const void* ptr, int* device);
  // The device a user stream belongs to (the current device for the legacy default stream).
  virtual int stream_device(DeviceStream stream) = 0;
  // Whether the stream is being captured into a CUDA graph (for the legacy default stream: also while another
  // blocking stream of its device is, since then nothing may be enqueued on it).
  virtual bool stream_capturing(DeviceStream stream) = 0;
  // Whether the legacy default stream synchronizes with it (it does with itself and with blocking streams).
  virtual bool stream_blocking(DeviceStream stream) = 0;
  virtual std::unique_ptr<DeviceEvent> record(DeviceStream stream) = 0;
  // Work on `stream` after this waits for the caller's own event (a cudaEvent_t) as recorded at this call: later
  // records of it, or its destruction, change nothing.
  virtual void wait_user_event(DeviceStream stream, void* event) = 0;
  // Work on `stream` after this waits until the event is done (an event of this runtime's, of the same device).
  virtual void wait_event(DeviceStream stream, DeviceEvent& event) = 0;
  // Work on `stream` after this waits until (int32_t)(*word - value) >= 0; word is in alloc_mapped memory.
  virtual void wait_value(DeviceStream stream, const volatile uint32_t* word, uint32_t value) = 0;
  // When the stream's earlier work has finished, it writes value into word (alloc_mapped memory).
  virtual void write_value(DeviceStream stream, volatile uint32_t* word, uint32_t value) = 0;
  // When the stream's earlier work has finished, it writes the device's clock in nanoseconds into word
  // (alloc_mapped memory, 8-byte aligned): differences time the work between two such writes.
  virtual void write_timestamp(DeviceStream stream, uint64_t* word) = 0;
  // Calls on a stream run on the stream's device and leave the calling thread's current device as it was.
  virtual void copy_async(void* dst, const void* src, size_t bytes, DeviceStream stream) = 0;
  // A copy by a kernel rather than a copy engine, between memory that kernels on the stream's device reach: that
  // device's memory, managed memory, alloc_mapped memory (docs/cuda.md, "What a parked stream blocks").
  virtual void kernel_copy_async(void* dst, const void* src, size_t bytes, DeviceStream stream) = 0;
  // Copies between device memory of `device` and alloc_mapped memory on a stream that must not wait behind a parked
  // stream's copies go by kernel where the stream is on that device (a copy engine's queue can hold a copy parked
  // behind a gate), else by copy engine: staging_copy_async(..., kernel_copies_on(stream, device)).
  bool kernel_copies_on(DeviceStream stream, int device) { return stream_device(stream) == device; }
  void staging_copy_async(void* dst, const void* src, size_t bytes, DeviceStream stream, bool by_kernel) {
    if (bytes == 0) return;
    if (by_kernel)
      kernel_copy_async(dst, src, bytes, stream);
    else
      copy_async(dst, src, bytes, stream);
  }
  // A stream of the library's own on `device`; it never waits for the legacy default stream.
  virtual DeviceStream create_stream(int device) = 0;
  virtual void destroy_stream(DeviceStream stream) = 0;
  // Page-locked host memory mapped for every device; nullptr when out of memory.
  virtual void* alloc_mapped(size_t bytes) = 0;
  virtual void free_mapped(void* ptr) = 0;
  // Device memory on `device`; nullptr when out of memory.
  virtual void* alloc_device(size_t bytes, int device) = 0;
  virtual void free_device(void* ptr) = 0;
  // Stream-ordered device memory of the library's own (cudaMallocAsync on stream's device): usable by work on
  // `stream` after the call, and on other streams once that work has finished; freed after the stream's earlier work,
  // without waiting for the device (cudaFree would wait for every stream, a parked one included). nullptr when out
  // of memory.
  virtual void* alloc_device_async(size_t bytes, DeviceStream stream) = 0;
  virtual void free_device_async(void* ptr, DeviceStream stream) = 0;
  // The allocation ptr lies in; false when it is not device memory of this runtime.
  virtual bool allocation(const void* ptr, DeviceAllocation* out) = 0;
  // A handle that another process of this host opens to map the exportable allocation starting at base.
  virtual void export_ipc(uintptr_t base, IpcHandle* out) = 0;
  // Maps a peer's allocation on `device` (peer access enabled as needed); throws when it cannot. close_ipc unmaps.
  virtual void* open_ipc(const IpcHandle& handle, int device) = 0;
  virtual void close_ipc(void* mapped, int device) = 0;
  virtual GpuId gpu_id(int device) = 0;
  // The GPUs whose memory kernels on `device` can access: itself and its peers with peer access.
  virtual std::vector<GpuId> reachable_gpus(int device) = 0;
  // Stream-ordered reductions with the CPU reference's rules (kernels/cpu/reduce.h): dst = a op b (a or b may be
  // dst; avg is a sum here), and dst /= divisor.
  virtual void reduce_async(void* dst, const void* a, const void* b, size_t count, bagua_datatype_t dtype,
                            bagua_redop_t op, DeviceStream stream) = 0;
  virtual void divide_async(void* dst, size_t count, bagua_datatype_t dtype, int divisor, DeviceStream stream) = 0;
  // Every dsts[d] = (srcs[0] op srcs[1] op ... left to right) / divisor (0: none), the bits of reduce_async over the
  // sources in turn and then divide_async, in one pass over the data. srcs[0] may be dsts[0]; no other overlap.
  virtual void reduce_spans_async(const std::vector<void*>& dsts, const std::vector<const void*>& srcs, size_t count,
                                  bagua_datatype_t dtype, bagua_redop_t op, int divisor, DeviceStream stream) = 0;
  // kernel_copy_async and reduce_spans_async between spans whose addresses the stream reads when it runs the work
  // (kernels/late_span.h): nothing happens where a word is 0 then. The IPC path on the caller's stream enqueues them
  // at the call, before the ranks have decided how the call goes (docs/cuda.md).
  virtual void late_copy_async(LateSpan dst, LateSpan src, size_t bytes, DeviceStream stream) = 0;
  virtual void late_reduce_spans_async(const std::vector<LateSpan>& dsts, const std::vector<LateSpan>& srcs,
                                       size_t count, bagua_datatype_t dtype, bagua_redop_t op, int divisor,
                                       DeviceStream stream) = 0;
  // x = average_correction(x, sum, snapshot, n) element-wise (kernels/reduce_math.h), float32 or float64.
  virtual void average_correct_async(void* x, const void* sum, const void* snapshot, size_t count,
                                     bagua_datatype_t dtype, int n, DeviceStream stream) = 0;
  // Stream-ordered compression of fp32 values (kernels/quantize.h): the CPU reference's bytes. Every pointer is
  // device memory or alloc_mapped memory.
  virtual void compress_async(const CompressionSpec& spec, const float* x, size_t count, float* error,
                              const RoundingKey& key, uint8_t* out, DeviceStream stream) = 0;
  // out = deq(in), or with accumulate out += deq(in).
  virtual void decompress_async(const CompressionSpec& spec, const uint8_t* in, size_t count, float* out,
                                bool accumulate, DeviceStream stream) = 0;
  // kernels/quantize.h's gossip_difference; replicas and weights are host arrays of at most kMaxGossipReplicas.
  virtual void gossip_difference_async(float* diff, const float* x, const float* self, const float* const* replicas,
                                       const float* weights, int nreplicas, float self_weight, size_t count,
                                       DeviceStream stream) = 0;
  // fp32 <-> fp16/bf16 (one side is BAGUA_FLOAT32; the same types copy).
  virtual void convert_async(void* dst, bagua_datatype_t dst_type, const void* src, bagua_datatype_t src_type,
                             size_t count, DeviceStream stream) = 0;
  // Blocks until the stream's work is done; throws TIMEOUT after timeout_ms.
  virtual void synchronize(DeviceStream stream, int timeout_ms) = 0;
  // Makes `device` current for this thread's next calls (the library's own threads only).
  virtual void set_device(int device) = 0;
  // Runs `work` with `device` current on the calling thread, so that the legacy default stream (nullptr) there is
  // that device's; the thread's own context comes back after.
  virtual void on_device(int device, const std::function<void()>& work) = 0;
  // Copies host memory to `dst`, a caller's buffer of host or device memory: into device memory on the legacy
  // default stream of dst's device (after the caller's earlier work there), done when it returns; throws TIMEOUT
  // after timeout_ms.
  void copy_from_host_to_any(void* dst, const void* src, size_t bytes, int timeout_ms);
  // Called once by each library thread that touches CUDA: relaxed stream-capture mode, so that a user's
  // global-mode capture elsewhere does not fail our calls.
  virtual void enter_library_thread() = 0;
};

// The runtime in use: the stand-in when BAGUA_DEVICE_STANDIN=1, CUDA when built with it, otherwise one that
// sees only host memory. Chosen once per process, without any CUDA call.
DeviceRuntime& device_runtime();

// The CUDA implementation, or nullptr in a build without CUDA. It makes no CUDA call while the process has not
// loaded the CUDA driver (device memory cannot exist then): a CPU-only job on a GPU host never starts CUDA, so its
// forked children still can.
DeviceRuntime* cuda_device_runtime();

// The stand-in's extras for tests: run `task` on a stand-in stream in order with its other work, and mark a
// stream as capturing. nullptr unless the stand-in is in use.
class StandinControl {
 public:
  virtual ~StandinControl() = default;
  virtual void run_on_stream(DeviceStream stream, std::function<void()> task) = 0;
  virtual void set_capturing(DeviceStream stream, bool capturing) = 0;
  // A stand-in "cudaEvent_t" recorded on stream now, for wait_user_event; never freed (tests only).
  virtual void* record_user_event(DeviceStream stream) = 0;
  // "Device memory" that peers cannot map, as cudaMallocAsync's (freed with free_device).
  virtual void* alloc_unexportable(size_t bytes) = 0;
};
StandinControl* standin_control();

}  // namespace bagua

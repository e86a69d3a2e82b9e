// The host stand-in for the CUDA runtime (BAGUA_DEVICE_STANDIN=1): "device memory" is host memory registered
// here, each stream is a thread running its work in order, events and stream waits are flags. It runs the device
// data path's protocol (ordering, release, failure, abort, IPC mappings) where no GPU is. Device 0 is its only
// device; BAGUA_STANDIN_GPU names it (default "standin-gpu-0"), so that ranks can play different GPUs,
// BAGUA_STANDIN_IPC_FAILS=1 makes opening a peer's IPC handle fail, BAGUA_STANDIN_COPY_US makes every copy take
// at least that long (a step that read a staging piece before its copy arrived then reads stale bytes),
// BAGUA_STANDIN_WAIT_LAG_US makes a stream reach each stream wait that long after the work before it ended (a wait
// that reads its word only after the call that enqueued it has returned), and
// BAGUA_STANDIN_BLOCKING_COPIES=1 plays what a GPU driver did on the H200 (docs/cuda.md, "What a parked stream
// blocks"): a copy to or from pageable memory (not device, alloc_mapped or IPC-mapped memory) returns only once its
// stream has run it, and holds meanwhile a process-wide lock. The calls the device proxy makes during an operation
// wait for that lock (events, copies, kernels, stream waits, allocations, stream creation, IPC opens); those that
// stream tasks make (free_device) do not. Memory detection takes it too (cudaPointerGetAttributes waited on the H200).
// Device memory is a memfd per allocation, so a peer process maps it through /proc/<pid>/fd/<fd> as IPC would.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "base/env.h"
#include "base/error.h"
#include "base/process_identity.h"
#include "kernels/cpu/reduce.h"
#include "kernels/device_runtime.h"
#include "kernels/dtype.h"

namespace bagua {

namespace {

// BAGUA_STANDIN_BLOCKING_COPIES: the "driver lock" a blocking copy holds until its stream has run it.
std::mutex g_driver_lock;
bool blocking_copies() {
  static const bool on = [] {
    const char* text = env_get_nonempty("BAGUA_STANDIN_BLOCKING_COPIES");
    return text != nullptr && std::strcmp(text, "0") != 0;
  }();
  return on;
}
// Taken by each runtime call the library makes while that lock may be held elsewhere.
class DriverTurn {
 public:
  DriverTurn() : lock_(g_driver_lock, std::defer_lock) {
    if (blocking_copies()) lock_.lock();
  }

 private:
  std::unique_lock<std::mutex> lock_;
};

class StandinStream {
 public:
  StandinStream() {
    // Detached and never freed: a stream may still be parked on a stream wait when the process exits.
    std::thread([this] { run(); }).detach();
  }
  void enqueue(std::function<void()> task) {
    std::lock_guard<std::mutex> lock(mutex_);
    tasks_.push_back(std::move(task));
    ++enqueued_;
    cv_.notify_all();
  }
  uint64_t enqueued() {
    std::lock_guard<std::mutex> lock(mutex_);
    return enqueued_;
  }
  uint64_t finished() const { return finished_.load(std::memory_order_acquire); }
  std::atomic<bool> capturing{false};

 private:
  void run() {
    for (;;) {
      std::function<void()> task;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        cv_.wait(lock, [&] { return !tasks_.empty(); });
        task = std::move(tasks_.front());
        tasks_.pop_front();
      }
      task();
      finished_.fetch_add(1, std::memory_order_release);
    }
  }
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_;
  uint64_t enqueued_ = 0;
  std::atomic<uint64_t> finished_{0};
};

class StandinEvent final : public DeviceEvent {
 public:
  StandinEvent(StandinStream* stream, uint64_t target) : stream_(stream), target_(target) {}
  StandinEvent(const StandinEvent&) = default;
  ~StandinEvent() override { DriverTurn turn; }  // as cudaEventDestroy
  bool done() override {
    DriverTurn turn;
    return stream_->finished() >= target_;
  }
  StandinStream* stream() const { return stream_; }
  uint64_t target() const { return target_; }

 private:
  StandinStream* stream_;
  uint64_t target_;
};

constexpr char kIpcMagic[8] = {'b', 'g', 's', 't', 'a', 'n', 'd', 'i'};

struct StandinIpcHandle {
  char magic[8];
  int64_t pid;
  int32_t fd;
  uint32_t pid_namespace;  // the exporter's: its pid names it only within that namespace
  uint64_t bytes;
};
static_assert(sizeof(StandinIpcHandle) <= sizeof(IpcHandle));

size_t mapped_length(size_t bytes) { return std::max<size_t>(4096, (bytes + 4095) & ~size_t{4095}); }

// A duration in microseconds from the environment (0 when unset or negative).
long env_microseconds(const char* name) {
  const char* text = env_get_nonempty(name);
  return text ? std::max(0L, std::atol(text)) : 0L;
}

// BAGUA_STANDIN_COPY_US: how long each copy (and each piece of late work) takes on a stand-in stream.
long copy_delay_us() {
  static const long delay_us = env_microseconds("BAGUA_STANDIN_COPY_US");
  return delay_us;
}

// BAGUA_STANDIN_WAIT_LAG_US: how long a stand-in stream takes to reach each stream wait.
long wait_lag_us() {
  static const long lag_us = env_microseconds("BAGUA_STANDIN_WAIT_LAG_US");
  return lag_us;
}

// A copy as a stand-in stream runs it. Slow (BAGUA_STANDIN_COPY_US): the source is read when the copy starts and the
// destination written when it ends, so that both a read of the destination too early and a write of the source after
// the copy began show.
void copy_on_stream(void* dst, const void* src, size_t bytes) {
  const long delay_us = copy_delay_us();
  if (delay_us == 0) {
    std::memcpy(dst, src, bytes);
    return;
  }
  std::vector<uint8_t> held(static_cast<const uint8_t*>(src), static_cast<const uint8_t*>(src) + bytes);
  std::this_thread::sleep_for(std::chrono::microseconds(delay_us));
  std::memcpy(dst, held.data(), bytes);
}

// A late span's address as the stream runs (acquire: what the host wrote before the word is visible); nullptr for 0.
uint8_t* resolve(const LateSpan& span) {
  const uint64_t base = __atomic_load_n(span.base, __ATOMIC_ACQUIRE);
  return base == 0 ? nullptr : reinterpret_cast<uint8_t*>(base + span.offset);
}

// reduce_spans_async's work, as the stream runs it.
void reduce_spans_now(const std::vector<void*>& dsts, const std::vector<const void*>& srcs, size_t count,
                      bagua_datatype_t dtype, bagua_redop_t op, int divisor) {
  const size_t bytes = count * datatype_size(dtype);
  if (srcs.size() == 1 && dsts[0] != srcs[0]) std::memcpy(dsts[0], srcs[0], bytes);
  for (size_t k = 1; k < srcs.size(); ++k) reduce_from(dsts[0], k == 1 ? srcs[0] : dsts[0], srcs[k], count, dtype, op);
  if (divisor) divide_by(dsts[0], count, dtype, divisor);
  for (size_t d = 1; d < dsts.size(); ++d) std::memcpy(dsts[d], dsts[0], bytes);
}

bool word_reached(const volatile uint32_t* word, uint32_t value) {
  uint32_t now = __atomic_load_n(const_cast<const uint32_t*>(word), __ATOMIC_ACQUIRE);
  return static_cast<int32_t>(now - value) >= 0;
}

class StandinRuntime final : public DeviceRuntime, public StandinControl {
 public:
  const char* name() const override { return "host stand-in"; }
  bool usable() override { return true; }

  void check_host_only(const void* ptr) override {
    auto p = reinterpret_cast<uintptr_t>(ptr);
    std::lock_guard<std::mutex> lock(mutex_);  // (no driver turn: that is what the scope is for)
    auto it = device_blocks_.upper_bound(p);
    if (it != device_blocks_.begin() && p < std::prev(it)->first + std::prev(it)->second.bytes)
      fail(BAGUA_ERR_INTERNAL, "a host-memory-only thread passed device memory ({}) to a call", ptr);
  }
  MemoryType query_memory_type(const void* ptr, int* device) override {
    DriverTurn turn;  // (cudaPointerGetAttributes waited on the H200)
    auto p = reinterpret_cast<uintptr_t>(ptr);
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = device_blocks_.upper_bound(p);
    bool inside = it != device_blocks_.begin() && p < std::prev(it)->first + std::prev(it)->second.bytes;
    if (device) *device = inside ? 0 : -1;
    return inside ? MemoryType::kDevice : MemoryType::kHost;
  }
  int stream_device(DeviceStream) override { return 0; }
  bool stream_capturing(DeviceStream stream) override { return stream_of(stream)->capturing.load(); }
  // The stand-in's streams never wait for each other; only the legacy default one counts as blocking.
  bool stream_blocking(DeviceStream stream) override {
    return stream_of(stream) == &legacy_default_ || stream == kPerThread;
  }

  std::unique_ptr<DeviceEvent> record(DeviceStream stream) override {
    DriverTurn turn;
    StandinStream* s = stream_of(stream);
    return std::make_unique<StandinEvent>(s, s->enqueued());
  }
  void* record_user_event(DeviceStream stream) override {
    StandinStream* s = stream_of(stream);
    return new StandinEvent(s, s->enqueued());
  }
  void wait_event(DeviceStream stream, DeviceEvent& event) override {
    DriverTurn turn;
    auto& after = static_cast<StandinEvent&>(event);
    // The task keeps no event: an event's destruction takes the driver turn, which a stream task must never wait for.
    stream_of(stream)->enqueue([other = after.stream(), target = after.target()] {
      while (other->finished() < target) std::this_thread::sleep_for(std::chrono::microseconds(20));
    });
  }
  void wait_user_event(DeviceStream stream, void* event) override {
    wait_event(stream, *static_cast<StandinEvent*>(event));  // (its position is fixed when recorded, as a snapshot)
  }
  void wait_value(DeviceStream stream, const volatile uint32_t* word, uint32_t value) override {
    DriverTurn turn;
    stream_of(stream)->enqueue([word, value] {
      if (const long lag_us = wait_lag_us()) std::this_thread::sleep_for(std::chrono::microseconds(lag_us));
      while (!word_reached(word, value)) std::this_thread::sleep_for(std::chrono::microseconds(20));
    });
  }
  void write_value(DeviceStream stream, volatile uint32_t* word, uint32_t value) override {
    DriverTurn turn;
    stream_of(stream)->enqueue([word, value] { __atomic_store_n(word, value, __ATOMIC_RELEASE); });
  }
  void write_timestamp(DeviceStream stream, uint64_t* word) override {
    DriverTurn turn;
    stream_of(stream)->enqueue([word] {
      *word = static_cast<uint64_t>(
          std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
              .count());
    });
  }
  void kernel_copy_async(void* dst, const void* src, size_t bytes, DeviceStream stream) override {
    copy_async(dst, src, bytes, stream);  // (device and mapped memory: never a blocking copy)
  }
  void copy_async(void* dst, const void* src, size_t bytes, DeviceStream stream) override {
    if (blocking_copies() && (pageable(dst) || pageable(src))) {
      // As the driver's pageable copies: returns once the stream has run it, holding the driver lock until then.
      std::lock_guard<std::mutex> held(g_driver_lock);
      StandinStream* s = stream_of(stream);
      s->enqueue([dst, src, bytes] { std::memcpy(dst, src, bytes); });
      const uint64_t target = s->enqueued();
      while (s->finished() < target) std::this_thread::sleep_for(std::chrono::microseconds(20));
      return;
    }
    DriverTurn turn;
    stream_of(stream)->enqueue([dst, src, bytes] { copy_on_stream(dst, src, bytes); });
  }
  DeviceStream create_stream(int) override {
    DriverTurn turn;
    return new StandinStream;
  }
  void destroy_stream(DeviceStream) override {}  // its thread may still run; the object is leaked on purpose

  // A stream that touches pinned memory after it was freed faults, as a GPU reading freed pinned memory would: the
  // pages are made inaccessible and their addresses never reused. Under AddressSanitizer, heap memory instead, whose
  // reports also cover overruns.
  void* alloc_mapped(size_t bytes) override {
    DriverTurn turn;
#ifdef __SANITIZE_ADDRESS__
    const size_t length = bytes ? bytes : 1;
    void* p = std::malloc(length);
    if (p == nullptr) return nullptr;
#else
    const size_t length = mapped_length(bytes);
    void* p = mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return nullptr;
#endif
    std::lock_guard<std::mutex> lock(mutex_);
    mapped_blocks_[reinterpret_cast<uintptr_t>(p)] = length;
    return p;
  }
  void free_mapped(void* ptr) override {
    DriverTurn turn;
    size_t length = 0;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto it = mapped_blocks_.find(reinterpret_cast<uintptr_t>(ptr));
      if (it == mapped_blocks_.end()) return;
      length = it->second;
      mapped_blocks_.erase(it);
    }
#ifdef __SANITIZE_ADDRESS__
    (void)length;
    std::free(ptr);
#else
    madvise(ptr, length, MADV_DONTNEED);  // the memory goes back; the addresses stay reserved
    mprotect(ptr, length, PROT_NONE);
#endif
  }
  void* alloc_device(size_t bytes, int) override {
    DriverTurn turn;
    const size_t length = mapped_length(bytes);
    int fd = memfd_create("bagua-standin-device", MFD_CLOEXEC);
    if (fd < 0) return nullptr;
    void* p = MAP_FAILED;
    if (ftruncate(fd, static_cast<off_t>(length)) == 0)
      p = mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
      close(fd);
      return nullptr;
    }
    std::lock_guard<std::mutex> lock(mutex_);
    device_blocks_[reinterpret_cast<uintptr_t>(p)] = Block{bytes ? bytes : 1, ++next_buffer_id_, fd};
    return p;
  }
  void* alloc_unexportable(size_t bytes) override {
    void* p = std::malloc(bytes ? bytes : 1);
    if (p == nullptr) return nullptr;
    std::lock_guard<std::mutex> lock(mutex_);
    device_blocks_[reinterpret_cast<uintptr_t>(p)] = Block{bytes ? bytes : 1, ++next_buffer_id_, -1};
    return p;
  }
  void* alloc_device_async(size_t bytes, DeviceStream) override { return alloc_device(bytes, 0); }
  void free_device_async(void* ptr, DeviceStream stream) override {
    if (ptr != nullptr) stream_of(stream)->enqueue([this, ptr] { free_device(ptr); });
  }
  void free_device(void* ptr) override {
    if (ptr == nullptr) return;
    Block block;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto it = device_blocks_.find(reinterpret_cast<uintptr_t>(ptr));
      if (it == device_blocks_.end()) return;
      block = it->second;
      device_blocks_.erase(it);
    }
    if (block.fd < 0) {
      std::free(ptr);
      return;
    }
    munmap(ptr, mapped_length(block.bytes));
    close(block.fd);
  }

  bool allocation(const void* ptr, DeviceAllocation* out) override {
    auto p = reinterpret_cast<uintptr_t>(ptr);
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = device_blocks_.upper_bound(p);
    if (it == device_blocks_.begin()) return false;
    --it;
    if (p >= it->first + it->second.bytes) return false;
    *out = DeviceAllocation{it->first, it->second.bytes, it->second.buffer_id, it->second.fd >= 0};
    return true;
  }
  void export_ipc(uintptr_t base, IpcHandle* out) override {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = device_blocks_.find(base);
    if (it == device_blocks_.end() || it->second.fd < 0)
      fail(BAGUA_ERR_INVALID_ARGUMENT, "stand-in: no exportable allocation starts at {:#x}", base);
    StandinIpcHandle h{};
    std::memcpy(h.magic, kIpcMagic, sizeof(kIpcMagic));
    h.pid = getpid();
    h.pid_namespace = pid_namespace_id();
    h.fd = it->second.fd;
    h.bytes = it->second.bytes;
    std::memset(out->bytes, 0, sizeof(out->bytes));
    std::memcpy(out->bytes, &h, sizeof(h));
  }
  void* open_ipc(const IpcHandle& handle, int) override {
    DriverTurn turn;
    if (const char* fails = env_get_nonempty("BAGUA_STANDIN_IPC_FAILS"); fails && std::strcmp(fails, "0") != 0)
      fail(BAGUA_ERR_CUDA, "stand-in IPC: opening handles fails here (BAGUA_STANDIN_IPC_FAILS)");
    StandinIpcHandle h;
    std::memcpy(&h, handle.bytes, sizeof(h));
    if (std::memcmp(h.magic, kIpcMagic, sizeof(kIpcMagic)) != 0)
      fail(BAGUA_ERR_INVALID_ARGUMENT, "stand-in: not a stand-in IPC handle");
    // From another PID namespace, /proc/<pid> names another process, or none (a real driver's handles are global).
    if (h.pid_namespace != pid_namespace_id())
      fail(BAGUA_ERR_CUDA, "stand-in IPC: the handle comes from another PID namespace");
    std::string path = fmt::format("/proc/{}/fd/{}", h.pid, h.fd);
    int fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
    if (fd < 0) fail(BAGUA_ERR_CUDA, "stand-in IPC: cannot open {}: {}", path, std::strerror(errno));
    const size_t length = mapped_length(h.bytes);
    void* p = mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED) fail(BAGUA_ERR_CUDA, "stand-in IPC: cannot map {}: {}", path, std::strerror(errno));
    std::lock_guard<std::mutex> lock(mutex_);
    ipc_mappings_[p] = length;
    return p;
  }
  void close_ipc(void* mapped, int) override {
    size_t length = 0;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto it = ipc_mappings_.find(mapped);
      if (it == ipc_mappings_.end()) return;
      length = it->second;
      ipc_mappings_.erase(it);
    }
    munmap(mapped, length);
  }
  GpuId gpu_id(int) override {
    const char* name = env_get_nonempty("BAGUA_STANDIN_GPU");
    std::string id = name ? name : "standin-gpu-0";
    GpuId out{};
    std::memcpy(out.bytes, id.data(), std::min(id.size(), sizeof(out.bytes)));
    return out;
  }
  std::vector<GpuId> reachable_gpus(int device) override { return {gpu_id(device)}; }
  void reduce_async(void* dst, const void* a, const void* b, size_t count, bagua_datatype_t dtype, bagua_redop_t op,
                    DeviceStream stream) override {
    DriverTurn turn;
    stream_of(stream)->enqueue([=] { reduce_from(dst, a, b, count, dtype, op); });
  }
  void divide_async(void* dst, size_t count, bagua_datatype_t dtype, int divisor, DeviceStream stream) override {
    DriverTurn turn;
    stream_of(stream)->enqueue([=] { divide_by(dst, count, dtype, divisor); });
  }
  void reduce_spans_async(const std::vector<void*>& dsts, const std::vector<const void*>& srcs, size_t count,
                          bagua_datatype_t dtype, bagua_redop_t op, int divisor, DeviceStream stream) override {
    DriverTurn turn;
    stream_of(stream)->enqueue([=] { reduce_spans_now(dsts, srcs, count, dtype, op, divisor); });
  }
  // Late work is slow as copies are (BAGUA_STANDIN_COPY_US): it reads its sources when it starts and writes its
  // destinations when it ends, so that a peer's input read too early or an output written too late shows.
  void late_copy_async(LateSpan dst, LateSpan src, size_t bytes, DeviceStream stream) override {
    DriverTurn turn;
    stream_of(stream)->enqueue([=] {
      uint8_t *to = resolve(dst), *from = resolve(src);
      if (to != nullptr && from != nullptr && bytes > 0) copy_on_stream(to, from, bytes);
    });
  }
  void late_reduce_spans_async(const std::vector<LateSpan>& dsts, const std::vector<LateSpan>& srcs, size_t count,
                               bagua_datatype_t dtype, bagua_redop_t op, int divisor, DeviceStream stream) override {
    DriverTurn turn;
    stream_of(stream)->enqueue([=] {
      std::vector<void*> to;
      std::vector<const void*> from;
      for (const LateSpan& s : dsts) to.push_back(resolve(s));
      for (const LateSpan& s : srcs) from.push_back(resolve(s));
      if (std::count(to.begin(), to.end(), nullptr) > 0 || std::count(from.begin(), from.end(), nullptr) > 0) return;
      if (copy_delay_us() == 0) {
        reduce_spans_now(to, from, count, dtype, op, divisor);
        return;
      }
      const size_t bytes = count * datatype_size(dtype);
      std::vector<uint8_t> result(bytes);
      reduce_spans_now({result.data()}, from, count, dtype, op, divisor);
      std::this_thread::sleep_for(std::chrono::microseconds(copy_delay_us()));
      for (void* d : to) std::memcpy(d, result.data(), bytes);
    });
  }
  void average_correct_async(void* x, const void* sum, const void* snapshot, size_t count, bagua_datatype_t dtype,
                             int n, DeviceStream stream) override {
    DriverTurn turn;
    stream_of(stream)->enqueue([=] { average_correct(x, sum, snapshot, count, dtype, n); });
  }
  void compress_async(const CompressionSpec& spec, const float* x, size_t count, float* error, const RoundingKey& key,
                      uint8_t* out, DeviceStream stream) override {
    DriverTurn turn;
    stream_of(stream)->enqueue([=] { compress_floats(spec, x, count, error, key, out); });
  }
  void decompress_async(const CompressionSpec& spec, const uint8_t* in, size_t count, float* out, bool accumulate,
                        DeviceStream stream) override {
    DriverTurn turn;
    stream_of(stream)->enqueue([=] {
      if (accumulate)
        decompress_accumulate_floats(spec, in, count, out);
      else
        decompress_floats(spec, in, count, out);
    });
  }
  void gossip_difference_async(float* diff, const float* x, const float* self, const float* const* replicas,
                               const float* weights, int nreplicas, float self_weight, size_t count,
                               DeviceStream stream) override {
    DriverTurn turn;
    std::vector<const float*> r(replicas, replicas + nreplicas);
    std::vector<float> w(weights, weights + nreplicas);
    stream_of(stream)->enqueue(
        [=] { gossip_difference(diff, x, self, r.data(), w.data(), nreplicas, self_weight, count); });
  }
  void convert_async(void* dst, bagua_datatype_t dst_type, const void* src, bagua_datatype_t src_type, size_t count,
                     DeviceStream stream) override {
    DriverTurn turn;
    stream_of(stream)->enqueue([=] { convert_floats(dst, dst_type, src, src_type, count); });
  }
  void synchronize(DeviceStream stream, int timeout_ms) override {
    StandinStream* s = stream_of(stream);
    uint64_t target = s->enqueued();
    auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    while (s->finished() < target) {
      if (std::chrono::steady_clock::now() > deadline)
        fail(BAGUA_ERR_TIMEOUT, "stand-in stream did not finish within {} ms", timeout_ms);
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
  void set_device(int) override {}
  void on_device(int device, const std::function<void()>& work) override {
    if (device != 0) fail(BAGUA_ERR_INTERNAL, "the stand-in has device 0 only, not {}", device);
    work();
  }
  void enter_library_thread() override {}

  void run_on_stream(DeviceStream stream, std::function<void()> task) override {
    stream_of(stream)->enqueue(std::move(task));
  }
  void set_capturing(DeviceStream stream, bool capturing) override { stream_of(stream)->capturing = capturing; }

 private:
  // CUDA's handles: NULL and 0x1 the legacy default stream, 0x2 the calling thread's per-thread default stream
  // (a stream of its own here, not ordered against the legacy one as in CUDA).
  static inline const DeviceStream kPerThread = reinterpret_cast<DeviceStream>(0x2);
  StandinStream* stream_of(DeviceStream stream) {
    if (stream == kPerThread) {
      thread_local StandinStream* per_thread = new StandinStream;  // never freed, like every stand-in stream
      return per_thread;
    }
    return stream && stream != reinterpret_cast<DeviceStream>(0x1) ? static_cast<StandinStream*>(stream)
                                                                   : &legacy_default_;
  }
  struct Block {
    size_t bytes = 0;
    uint64_t buffer_id = 0;
    int fd = -1;  // -1: not exportable (malloc'd)
  };
  std::mutex mutex_;
  std::map<uintptr_t, Block> device_blocks_;
  uint64_t next_buffer_id_ = 0;
  std::map<void*, size_t> ipc_mappings_;
  std::map<uintptr_t, size_t> mapped_blocks_;  // alloc_mapped's ("pinned")
  // Host memory that is neither stand-in device memory nor alloc_mapped's: "pageable".
  bool pageable(const void* ptr) {
    auto p = reinterpret_cast<uintptr_t>(ptr);
    std::lock_guard<std::mutex> lock(mutex_);
    auto mapped = mapped_blocks_.upper_bound(p);
    if (mapped != mapped_blocks_.begin() && p < std::prev(mapped)->first + std::prev(mapped)->second) return false;
    auto peer = ipc_mappings_.upper_bound(const_cast<void*>(ptr));
    if (peer != ipc_mappings_.begin() &&
        p < reinterpret_cast<uintptr_t>(std::prev(peer)->first) + std::prev(peer)->second)
      return false;
    auto device = device_blocks_.upper_bound(p);
    return !(device != device_blocks_.begin() && p < std::prev(device)->first + std::prev(device)->second.bytes);
  }
  StandinStream legacy_default_;
};

StandinRuntime* g_standin = nullptr;

}  // namespace

DeviceRuntime* make_standin_runtime() {
  if (g_standin == nullptr) g_standin = new StandinRuntime;  // never freed: its streams outlive static destructors
  return g_standin;
}

StandinControl* standin_control() {
  DeviceRuntime& runtime = device_runtime();
  return &runtime == g_standin ? g_standin : nullptr;
}

}  // namespace bagua

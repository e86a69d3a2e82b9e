// Peers' device allocations mapped through CUDA IPC, kept open across calls: opening a handle costs far more than
// a small collective. Keyed by the owner's process and the allocation's address; an entry whose buffer id differs
// from the one a peer now reports (the owner freed the allocation and a new one took its address) is closed and
// mapped again, so a stale mapping is never used. At most `most_entries` stay open, the least recently used
// closed first: an open mapping keeps the owner's freed memory allocated. A mapping still in use by an operation
// closes when that operation lets it go. Not thread-safe: the device proxy's thread uses one, and CallerIpcMappings
// (below) another under its lock.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <tuple>
#include <utility>
#include <vector>

#include "kernels/device_runtime.h"

namespace bagua {

class IpcCache {
 public:
  using Open = std::function<void*(const IpcHandle&, int device)>;
  using Close = std::function<void(void* mapped, int device)>;
  IpcCache(size_t most_entries, Open open, Close close);

  // The mapping on `device` of the allocation at `base` in `process` (base/process_identity.h's key) with this buffer
  // id, opened from `handle` if needed. Throws what open throws.
  std::shared_ptr<void> map(uint64_t process, uintptr_t base, uint64_t buffer_id, const IpcHandle& handle, int device);
  // That mapping if it is open (nullptr otherwise); opens nothing.
  std::shared_ptr<void> find(uint64_t process, uintptr_t base, uint64_t buffer_id, int device);
  // Keeps a mapping opened elsewhere, as map() keeps the ones it opens (close lets it go).
  std::shared_ptr<void> insert(uint64_t process, uintptr_t base, uint64_t buffer_id, int device, void* mapped);
  size_t size() const { return entries_.size(); }
  void clear() { entries_.clear(); }
  uint64_t opened() const { return opened_.load(); }  // handles opened so far (tests read it from any thread)

 private:
  struct Entry {
    uint64_t buffer_id = 0;
    std::shared_ptr<void> mapping;
    uint64_t last_use = 0;
  };
  size_t most_entries_;
  Open open_;
  Close close_;
  void make_room();  // closes the least recently used while the cache is full
  std::map<std::tuple<uint64_t, uintptr_t, int>, Entry> entries_;
  uint64_t clock_ = 0;
  std::atomic<uint64_t> opened_{0};
};

// The IPC path on the caller's stream (docs/cuda.md): the proxy thread makes no CUDA call there, so it only looks
// peers' mappings up (find) and asks for those it lacks (request); the communicator's next device call opens them on
// its own thread (open_requested) before it enqueues, and closes the ones let go while no stream of the process is
// parked on a gate (closing may wait for the device). The locks are never held across a runtime call.
class CallerIpcMappings {
 public:
  CallerIpcMappings(DeviceRuntime& runtime, size_t most_entries);
  ~CallerIpcMappings();  // closes every mapping (runtime calls): after the last operation that used one
  // Any thread, no runtime call.
  std::shared_ptr<void> find(uint64_t process, uintptr_t base, uint64_t buffer_id, int device);
  void request(uint64_t process, uintptr_t base, uint64_t buffer_id, const IpcHandle& handle, int device);
  // A calling thread: opens what was asked (a handle that fails to open is not asked for again: its calls stay
  // staged, with one warning per process), then closes what was let go, each while may_close() (no gate parked).
  void open_requested(const std::function<bool()>& may_close);
  uint64_t opened() const { return cache_.opened(); }
  size_t pending_closes();

 private:
  struct Wanted {
    uint64_t process;
    uintptr_t base;
    uint64_t buffer_id;
    IpcHandle handle;
    int device;
  };
  DeviceRuntime& runtime_;
  // Mappings let go, to close (before cache_, whose close queues them here: a mapping's last user may be any thread).
  std::shared_ptr<std::mutex> closes_mutex_ = std::make_shared<std::mutex>();
  std::shared_ptr<std::vector<std::pair<void*, int>>> closes_ = std::make_shared<std::vector<std::pair<void*, int>>>();
  std::mutex mutex_;
  IpcCache cache_;  // under mutex_
  std::vector<Wanted> wanted_;
  std::set<std::tuple<uint64_t, uintptr_t, uint64_t, int>> failed_;  // (process, base, buffer id, device)
};

}  // namespace bagua

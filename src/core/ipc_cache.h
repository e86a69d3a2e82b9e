// Peers' device allocations mapped through CUDA IPC, kept open across calls: opening a handle costs far more than
// a small collective. Keyed by the owner's process and the allocation's address; an entry whose buffer id differs
// from the one a peer now reports (the owner freed the allocation and a new one took its address) is closed and
// mapped again, so a stale mapping is never used. At most `most_entries` stay open, the least recently used
// closed first: an open mapping keeps the owner's freed memory allocated. A mapping still in use by an operation
// closes when that operation lets it go. Used by one thread (the communicator's device proxy).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <tuple>

#include "kernels/device_runtime.h"

namespace bagua {

class IpcCache {
 public:
  using Open = std::function<void*(const IpcHandle&, int device)>;
  using Close = std::function<void(void* mapped, int device)>;
  IpcCache(size_t most_entries, Open open, Close close);

  // The mapping on `device` of the allocation at `base` in process `pid` with this buffer id, opened from `handle`
  // if needed. Throws what open throws.
  std::shared_ptr<void> map(uint64_t pid, uintptr_t base, uint64_t buffer_id, const IpcHandle& handle, int device);
  size_t size() const { return entries_.size(); }
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
  std::map<std::tuple<uint64_t, uintptr_t, int>, Entry> entries_;
  uint64_t clock_ = 0;
  std::atomic<uint64_t> opened_{0};
};

}  // namespace bagua

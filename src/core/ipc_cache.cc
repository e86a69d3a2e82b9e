#include "core/ipc_cache.h"

#include <algorithm>

namespace bagua {

IpcCache::IpcCache(size_t most_entries, Open open, Close close)
    : most_entries_(std::max<size_t>(most_entries, 1)), open_(std::move(open)), close_(std::move(close)) {}

std::shared_ptr<void> IpcCache::map(uint64_t pid, uintptr_t base, uint64_t buffer_id, const IpcHandle& handle,
                                    int device) {
  const auto key = std::make_tuple(pid, base, device);
  auto it = entries_.find(key);
  if (it != entries_.end() && it->second.buffer_id == buffer_id) {
    it->second.last_use = ++clock_;
    return it->second.mapping;
  }
  if (it != entries_.end()) entries_.erase(it);  // another allocation now lives there: drop the old mapping
  while (entries_.size() >= most_entries_) {
    auto oldest = std::min_element(entries_.begin(), entries_.end(),
                                   [](const auto& a, const auto& b) { return a.second.last_use < b.second.last_use; });
    entries_.erase(oldest);
  }
  void* mapped = open_(handle, device);
  ++opened_;
  Close close = close_;
  std::shared_ptr<void> mapping(mapped, [close, device](void* p) { close(p, device); });
  entries_[key] = Entry{buffer_id, mapping, ++clock_};
  return mapping;
}

}  // namespace bagua

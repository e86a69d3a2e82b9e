#include "core/ipc_cache.h"

#include <algorithm>
#include <atomic>

#include "base/error.h"
#include "base/logging.h"

namespace bagua {

IpcCache::IpcCache(size_t most_entries, Open open, Close close)
    : most_entries_(std::max<size_t>(most_entries, 1)), open_(std::move(open)), close_(std::move(close)) {}

void IpcCache::make_room() {
  while (entries_.size() >= most_entries_) {
    auto oldest = std::min_element(entries_.begin(), entries_.end(),
                                   [](const auto& a, const auto& b) { return a.second.last_use < b.second.last_use; });
    entries_.erase(oldest);
  }
}

std::shared_ptr<void> IpcCache::find(uint64_t process, uintptr_t base, uint64_t buffer_id, int device) {
  auto it = entries_.find(std::make_tuple(process, base, device));
  if (it == entries_.end() || it->second.buffer_id != buffer_id) return nullptr;
  it->second.last_use = ++clock_;
  return it->second.mapping;
}

std::shared_ptr<void> IpcCache::map(uint64_t process, uintptr_t base, uint64_t buffer_id, const IpcHandle& handle,
                                    int device) {
  if (auto mapping = find(process, base, buffer_id, device)) return mapping;
  entries_.erase(std::make_tuple(process, base, device));  // another allocation now lives there: drop the old mapping
  make_room();
  return insert(process, base, buffer_id, device, open_(handle, device));
}

std::shared_ptr<void> IpcCache::insert(uint64_t process, uintptr_t base, uint64_t buffer_id, int device, void* mapped) {
  const auto key = std::make_tuple(process, base, device);
  entries_.erase(key);
  make_room();
  ++opened_;
  Close close = close_;
  std::shared_ptr<void> mapping(mapped, [close, device](void* p) { close(p, device); });
  entries_[key] = Entry{buffer_id, mapping, ++clock_};
  return mapping;
}

CallerIpcMappings::CallerIpcMappings(DeviceRuntime& runtime, size_t most_entries)
    : runtime_(runtime),
      cache_(
          most_entries, [](const IpcHandle&, int) -> void* { return nullptr; },  // (never asked to open)
          [closes = closes_, lock = closes_mutex_](void* mapped, int device) {
            std::lock_guard<std::mutex> held(*lock);
            closes->emplace_back(mapped, device);  // a mapping's last user may be the proxy thread: no runtime call
          }) {}

CallerIpcMappings::~CallerIpcMappings() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    wanted_.clear();  // nothing more is opened
    cache_.clear();   // lets every mapping go (queued)
  }
  open_requested([] { return true; });  // closes them all
}

std::shared_ptr<void> CallerIpcMappings::find(uint64_t process, uintptr_t base, uint64_t buffer_id, int device) {
  std::lock_guard<std::mutex> lock(mutex_);
  return cache_.find(process, base, buffer_id, device);
}

void CallerIpcMappings::request(uint64_t process, uintptr_t base, uint64_t buffer_id, const IpcHandle& handle,
                                int device) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (failed_.count(std::make_tuple(process, base, buffer_id, device))) return;
  for (const Wanted& w : wanted_)
    if (w.process == process && w.base == base && w.buffer_id == buffer_id && w.device == device) return;
  wanted_.push_back({process, base, buffer_id, handle, device});
}

void CallerIpcMappings::open_requested(const std::function<bool()>& may_close) {
  std::vector<Wanted> wanted;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    wanted.swap(wanted_);
  }
  for (const Wanted& w : wanted) {
    void* mapped = nullptr;
    try {
      mapped = runtime_.open_ipc(w.handle, w.device);
    } catch (const Error& e) {
      static std::atomic<bool> warned{false};
      if (!warned.exchange(true))
        BAGUA_WARN(
            "mapping a peer's device buffer through IPC failed (the peer may have freed it since its call); calls on "
            "it stay staged (said once per process): {}",
            e.what());
      std::lock_guard<std::mutex> lock(mutex_);
      failed_.insert(std::make_tuple(w.process, w.base, w.buffer_id, w.device));
      continue;
    }
    std::lock_guard<std::mutex> lock(mutex_);
    cache_.insert(w.process, w.base, w.buffer_id, w.device, mapped);
  }
  // One close at a time, each only while may_close() holds (a gate parked meanwhile stops them).
  for (;;) {
    std::pair<void*, int> close;
    {
      std::lock_guard<std::mutex> lock(*closes_mutex_);
      if (closes_->empty() || !may_close()) return;
      close = closes_->back();
      closes_->pop_back();
    }
    try {
      runtime_.close_ipc(close.first, close.second);
    } catch (...) {
    }
  }
}

size_t CallerIpcMappings::pending_closes() {
  std::lock_guard<std::mutex> lock(*closes_mutex_);
  return closes_->size();
}

}  // namespace bagua

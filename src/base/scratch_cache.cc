#include "base/scratch_cache.h"

#include <algorithm>
#include <iterator>
#include <mutex>
#include <vector>

namespace bagua {
namespace {

// Buffers below this size come from malloc's arenas, which already reuse memory.
constexpr size_t kCacheFrom = 256 << 10;
constexpr size_t kMostBuffers = 8;
// A cached buffer serves requests of at least this fraction of its size (a small request must not hold a
// large buffer that the next large request then has to allocate anew).
constexpr size_t kMostOversize = 2;
constexpr size_t kMostBytes = size_t{1} << 30;

struct Cached {
  uint8_t* data;
  size_t bytes;
};

class ScratchCache {
 public:
  std::shared_ptr<uint8_t[]> take(size_t bytes) {
    bytes = std::max<size_t>(bytes, 1);
    if (bytes < kCacheFrom) return std::shared_ptr<uint8_t[]>(new uint8_t[bytes]);
    Cached chosen{nullptr, 0};
    {
      std::lock_guard<std::mutex> lock(mutex_);
      retain_ = true;
      // The smallest that fits; of equal ones the last returned, whose pages the previous user touched (a
      // rotation over equal buffers paid a fault per page of the parts that only some users touch).
      auto best = free_.rend();
      for (auto it = free_.rbegin(); it != free_.rend(); ++it)
        if (it->bytes >= bytes && it->bytes <= kMostOversize * bytes &&
            (best == free_.rend() || it->bytes < best->bytes))
          best = it;
      if (best != free_.rend()) {
        chosen = *best;
        cached_bytes_ -= best->bytes;
        free_.erase(std::next(best).base());
      }
    }
    if (chosen.data == nullptr) chosen = Cached{new uint8_t[bytes], bytes};
    return std::shared_ptr<uint8_t[]>(chosen.data, [this, chosen](uint8_t*) { give_back(chosen); });
  }

  void release() {
    std::vector<Cached> dropped;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      dropped.swap(free_);
      cached_bytes_ = 0;
      retain_ = false;  // buffers still held come back to be freed, until the next take()
    }
    for (const Cached& c : dropped) delete[] c.data;
  }

  size_t cached_bytes() {
    std::lock_guard<std::mutex> lock(mutex_);
    return cached_bytes_;
  }

 private:
  // Keeps the buffer unless that exceeds the limits; then the smallest buffers go first (of equal ones the oldest).
  // free_ stays in the order buffers came back.
  void give_back(Cached c) {
    std::vector<Cached> dropped;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!retain_) {
        dropped.push_back(c);
      } else {
        free_.push_back(c);
        cached_bytes_ += c.bytes;
      }
      while (!free_.empty() && (free_.size() > kMostBuffers || cached_bytes_ > kMostBytes)) {
        auto smallest = std::min_element(free_.begin(), free_.end(),
                                         [](const Cached& a, const Cached& b) { return a.bytes < b.bytes; });
        dropped.push_back(*smallest);
        cached_bytes_ -= smallest->bytes;
        free_.erase(smallest);
      }
    }
    for (const Cached& d : dropped) delete[] d.data;
  }

  std::mutex mutex_;
  std::vector<Cached> free_;
  size_t cached_bytes_ = 0;
  bool retain_ = true;
};

// Never destroyed: buffers may come back during static destruction (the OS reclaims the rest at exit).
ScratchCache& cache() {
  static ScratchCache* instance = new ScratchCache();
  return *instance;
}

}  // namespace

std::shared_ptr<uint8_t[]> take_scratch(size_t bytes) { return cache().take(bytes); }
void release_scratch_cache() { cache().release(); }
size_t scratch_cache_bytes() { return cache().cached_bytes(); }

}  // namespace bagua

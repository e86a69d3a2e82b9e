#include "base/process_identity.h"

#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>

namespace bagua {

uint32_t pid_namespace_id() {
  struct stat st {};
  return stat("/proc/self/ns/pid", &st) == 0 ? static_cast<uint32_t>(st.st_ino) : 0;
}

uint64_t random_word() {
  uint64_t word = 0;
  if (getrandom(&word, sizeof(word), GRND_NONBLOCK) != static_cast<ssize_t>(sizeof(word))) {
    static std::atomic<uint64_t> counter{0};
    word = static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()) * 0x9e3779b97f4a7c15u ^
           (static_cast<uint64_t>(getpid()) << 32) ^ counter.fetch_add(1);
  }
  return word;
}

uint64_t process_key() {
  // Read once per pid: a forked child reads its own (the namespace does not change for a process, its pid does).
  static std::atomic<uint64_t> cached{0};
  const auto pid = static_cast<uint32_t>(getpid());
  uint64_t key = cached.load(std::memory_order_relaxed);
  if (key == 0 || static_cast<uint32_t>(key) != pid) {
    uint32_t space = pid_namespace_id();
    // Without /proc, a random stand-in: this process then matches no peer, whose pid might be this one's.
    if (space == 0) space = static_cast<uint32_t>(random_word()) | 1u;
    key = (static_cast<uint64_t>(space) << 32) | pid;
    cached.store(key, std::memory_order_relaxed);
  }
  return key;
}

}  // namespace bagua

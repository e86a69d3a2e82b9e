#include "base/process_identity.h"

#include <sys/stat.h>
#include <unistd.h>

#include <atomic>

namespace bagua {

uint32_t pid_namespace_id() {
  struct stat st {};
  return stat("/proc/self/ns/pid", &st) == 0 ? static_cast<uint32_t>(st.st_ino) : 0;
}

uint64_t process_key() {
  // Read once per pid: a forked child reads its own (the namespace does not change for a process, its pid does).
  static std::atomic<uint64_t> cached{0};
  const auto pid = static_cast<uint32_t>(getpid());
  uint64_t key = cached.load(std::memory_order_relaxed);
  if (key == 0 || static_cast<uint32_t>(key) != pid) {
    key = (static_cast<uint64_t>(pid_namespace_id()) << 32) | pid;
    cached.store(key, std::memory_order_relaxed);
  }
  return key;
}

}  // namespace bagua

#include "transport/cross_memory.h"

#include <sys/uio.h>

#include <cerrno>
#include <cstring>

namespace bagua {

std::string read_process_memory(pid_t pid, uint64_t address, void* out, size_t bytes) {
  auto* dst = static_cast<uint8_t*>(out);
  size_t done = 0;
  while (done < bytes) {
    iovec local{dst + done, bytes - done};
    iovec remote{reinterpret_cast<void*>(address + done), bytes - done};
    ssize_t n = process_vm_readv(pid, &local, 1, &remote, 1, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return n < 0 ? std::strerror(errno) : "no progress";
    done += static_cast<size_t>(n);
  }
  return {};
}

std::string write_process_memory(pid_t pid, uint64_t address, const void* in, size_t bytes) {
  const auto* src = static_cast<const uint8_t*>(in);
  size_t done = 0;
  while (done < bytes) {
    iovec local{const_cast<uint8_t*>(src + done), bytes - done};
    iovec remote{reinterpret_cast<void*>(address + done), bytes - done};
    ssize_t n = process_vm_writev(pid, &local, 1, &remote, 1, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return n < 0 ? std::strerror(errno) : "no progress";
    done += static_cast<size_t>(n);
  }
  return {};
}

}  // namespace bagua

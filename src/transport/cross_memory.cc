#include "transport/cross_memory.h"

#include <sys/uio.h>

#include <cerrno>
#include <cstring>

namespace bagua {

namespace {

// Copies until done (the kernel may copy less than asked); write: local -> remote, else remote -> local.
std::string cross_copy(pid_t pid, uint64_t address, uint8_t* local, size_t bytes, bool write) {
  size_t done = 0;
  while (done < bytes) {
    iovec near{local + done, bytes - done};
    iovec far{reinterpret_cast<void*>(address + done), bytes - done};
    ssize_t n = write ? process_vm_writev(pid, &near, 1, &far, 1, 0) : process_vm_readv(pid, &near, 1, &far, 1, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return n < 0 ? std::strerror(errno) : "no progress";
    done += static_cast<size_t>(n);
  }
  return {};
}

}  // namespace

std::string read_process_memory(pid_t pid, uint64_t address, void* out, size_t bytes) {
  return cross_copy(pid, address, static_cast<uint8_t*>(out), bytes, false);
}

std::string write_process_memory(pid_t pid, uint64_t address, const void* in, size_t bytes) {
  // process_vm_writev only reads the local iovec.
  return cross_copy(pid, address, const_cast<uint8_t*>(static_cast<const uint8_t*>(in)), bytes, true);
}

}  // namespace bagua

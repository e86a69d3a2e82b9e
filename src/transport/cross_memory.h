// Cross-memory attach (Linux process_vm_readv/writev): copies between this process and another one on the
// same host, given its pid and an address there. Both return an empty string on success, else why not.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace bagua {

std::string read_process_memory(pid_t pid, uint64_t address, void* out, size_t bytes);
std::string write_process_memory(pid_t pid, uint64_t address, const void* in, size_t bytes);

}  // namespace bagua

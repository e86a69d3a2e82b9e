// Which process this is, in a form that peers on the same machine can compare: a pid alone repeats across PID
// namespaces (containers that share a host's IPC namespace often all run their program as pid 1).
#pragma once

#include <sys/types.h>

#include <cstdint>

namespace bagua {

// The inode of this process's PID namespace (/proc/self/ns/pid), 0 where it cannot be read.
uint32_t pid_namespace_id();
// The pid in the low 32 bits, pid_namespace_id() above them (where that is 0, a random value: no peer then counts
// as this process, and none passes the single-copy probe).
uint64_t process_key();
// 64 random bits (getrandom, else the clock); never throws.
uint64_t random_word();
inline pid_t pid_of_process_key(uint64_t key) { return static_cast<pid_t>(key & 0xffffffffu); }

}  // namespace bagua

// The process's shared-memory mappings, and faulting their pages in ahead of use.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace bagua {

struct SharedMapping {
  uintptr_t begin = 0;
  uintptr_t end = 0;
  std::string device;  // "major:minor" and inode, as /proc/self/maps gives them: which object is mapped
  unsigned long inode = 0;
  std::string path;  // e.g. "/SYSV00000000 (deleted)"; empty for none
  bool operator==(const SharedMapping& o) const {
    return begin == o.begin && end == o.end && device == o.device && inode == o.inode && path == o.path;
  }
};

// One line of /proc/self/maps, when it is a readable and writable MAP_SHARED mapping.
bool parse_shared_mapping(const std::string& maps_line, SharedMapping* out);

// The process's readable and writable MAP_SHARED mappings; empty where /proc/self/maps cannot be read.
std::vector<SharedMapping> shared_mappings();

// Faults in the pages of [begin, end) of a shared-memory (tmpfs, SysV) mapping, contents unchanged. Uses
// MADV_POPULATE_WRITE (Linux 5.14); where the kernel lacks it, reads each page. False where it did nothing.
bool prefault_pages(uintptr_t begin, uintptr_t end) noexcept;

}  // namespace bagua

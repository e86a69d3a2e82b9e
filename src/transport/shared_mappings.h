// The process's shared-memory mappings, and faulting their pages in ahead of use.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace bagua {

struct SharedMapping {
  uintptr_t begin;
  uintptr_t end;
  std::string path;  // as /proc/self/maps names it, e.g. "/SYSV00000000 (deleted)"
  bool operator==(const SharedMapping& o) const { return begin == o.begin && end == o.end && path == o.path; }
};

// Readable and writable MAP_SHARED mappings of this process (from /proc/self/maps); empty where that cannot be read.
std::vector<SharedMapping> shared_mappings();

// Faults in the pages of [begin, end), contents unchanged. Returns false where the kernel refused.
bool prefault_pages(uintptr_t begin, uintptr_t end);

}  // namespace bagua

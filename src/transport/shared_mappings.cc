#include "transport/shared_mappings.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <fstream>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23  // Linux 5.14
#endif

namespace bagua {

namespace {
uintptr_t page_size() { return static_cast<uintptr_t>(sysconf(_SC_PAGESIZE)); }
}  // namespace

std::vector<SharedMapping> shared_mappings() {
  std::vector<SharedMapping> out;
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    unsigned long begin = 0, end = 0;
    char perms[5] = {};
    int path_at = 0;
    // begin-end perms offset dev inode path
    if (std::sscanf(line.c_str(), "%lx-%lx %4s %*s %*s %*s %n", &begin, &end, perms, &path_at) < 3) continue;
    if (perms[0] == 'r' && perms[1] == 'w' && perms[3] == 's')
      out.push_back({begin, end, path_at > 0 ? line.substr(static_cast<size_t>(path_at)) : std::string()});
  }
  return out;
}

bool prefault_pages(uintptr_t begin, uintptr_t end) {
  if (begin >= end) return true;
  if (madvise(reinterpret_cast<void*>(begin), end - begin, MADV_POPULATE_WRITE) == 0) return true;
  if (errno != EINVAL) return false;
  // Before Linux 5.14: a read of each page. A read fault on shared memory maps the page writable, so later writes
  // do not fault again.
  for (uintptr_t at = begin; at < end; at += page_size()) (void)*reinterpret_cast<const volatile char*>(at);
  return true;
}

}  // namespace bagua

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

// Whether this kernel knows MADV_POPULATE_WRITE, tried once on a page of our own: an EINVAL on someone else's
// mapping may mean other things (a mapping it refuses), where reading could fault.
bool kernel_populates() {
  static const bool known = [] {
    void* page = mmap(nullptr, page_size(), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (page == MAP_FAILED) return true;  // unknown: never fall back to reading
    const bool works = madvise(page, page_size(), MADV_POPULATE_WRITE) == 0 || errno != EINVAL;
    munmap(page, page_size());
    return works;
  }();
  return known;
}

}  // namespace

bool parse_shared_mapping(const std::string& line, SharedMapping* out) {
  unsigned long begin = 0, end = 0, inode = 0;
  char perms[5] = {}, device[32] = {};
  int path_at = 0;
  // begin-end perms offset dev inode [path]
  if (std::sscanf(line.c_str(), "%lx-%lx %4s %*s %31s %lu %n", &begin, &end, perms, device, &inode, &path_at) < 5)
    return false;
  if (perms[0] != 'r' || perms[1] != 'w' || perms[3] != 's' || end <= begin) return false;
  out->begin = begin;
  out->end = end;
  out->device = device;
  out->inode = inode;
  out->path = path_at > 0 && static_cast<size_t>(path_at) < line.size() ? line.substr(static_cast<size_t>(path_at))
                                                                        : std::string();
  return true;
}

std::vector<SharedMapping> shared_mappings() {
  std::vector<SharedMapping> out;
  std::ifstream maps("/proc/self/maps");
  std::string line;
  SharedMapping m;
  while (std::getline(maps, line))
    if (parse_shared_mapping(line, &m)) out.push_back(m);
  return out;
}

bool prefault_pages(uintptr_t begin, uintptr_t end) noexcept {
  if (begin >= end) return true;
  if (kernel_populates()) return madvise(reinterpret_cast<void*>(begin), end - begin, MADV_POPULATE_WRITE) == 0;
  // Before Linux 5.14: a read fault on shared memory maps the page writable, so later writes do not fault again.
  for (uintptr_t at = begin; at < end; at += page_size()) (void)*reinterpret_cast<const volatile char*>(at);
  return true;
}

}  // namespace bagua

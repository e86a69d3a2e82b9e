// Shared mappings: /proc/self/maps lines are parsed (paths with spaces, none, private mappings left out); a MAP_SHARED
// region is listed; prefault_pages maps every page of it into this process (touching them afterwards costs no
// fault) without changing what it holds; and the UCX rule picks the last 1.5 MiB of new SysV and UCX POSIX mappings
// only.
#include <catch2/catch.hpp>

#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "transport/shared_mappings.h"
#include "transport/ucx/ucx_transport.h"

using namespace bagua;

TEST_CASE("maps lines of shared mappings are parsed", "[transport]") {
  SharedMapping m;
  REQUIRE(
      parse_shared_mapping("7f772a3e5000-7f772a7fe000 rw-s 00000000 00:01 250806320   /SYSV00000000 (deleted)", &m));
  CHECK(m.begin == 0x7f772a3e5000);
  CHECK(m.end == 0x7f772a7fe000);
  CHECK(m.device == "00:01");
  CHECK(m.inode == 250806320);
  CHECK(m.path == "/SYSV00000000 (deleted)");
  REQUIRE(parse_shared_mapping("7f0000000000-7f0000001000 rw-s 00000000 00:05 42 ", &m));
  CHECK(m.path.empty());
  REQUIRE(parse_shared_mapping("7f0000000000-7f0000001000 rw-s 00000000 00:05 42", &m));
  CHECK(m.path.empty());
  CHECK_FALSE(parse_shared_mapping("7f0000000000-7f0000001000 rw-p 00000000 00:00 0   [heap]", &m));
  CHECK_FALSE(parse_shared_mapping("7f0000000000-7f0000001000 r--s 00000000 00:05 42 /dev/shm/x", &m));
  CHECK_FALSE(parse_shared_mapping("garbage", &m));
}

TEST_CASE("the UCX rule takes the end of new UCX mappings only", "[transport]") {
  const SharedMapping pool{0x10000000, 0x10419000, "00:01", 7, "/SYSV00000000 (deleted)"};
  const SharedMapping fifo{0x20000000, 0x20003000, "00:01", 8, "/SYSV00000000 (deleted)"};
  const SharedMapping posix{0x30000000, 0x30419000, "00:19", 9, "/dev/shm/ucx_shm_posix_40ec109c (deleted)"};
  const SharedMapping ours{0x40000000, 0x40400000, "00:01", 10, "/memfd:bagua-segment (deleted)"};
  uintptr_t from = 0;
  REQUIRE(ucx_prefault_range(pool, {}, &from));
  CHECK(from == pool.end - kUcxPrefaultBytes);
  REQUIRE(ucx_prefault_range(fifo, {}, &from));
  CHECK(from == fifo.begin);
  REQUIRE(ucx_prefault_range(posix, {}, &from));
  CHECK(from == posix.end - kUcxPrefaultBytes);
  CHECK_FALSE(ucx_prefault_range(ours, {}, &from));
  CHECK_FALSE(ucx_prefault_range(pool, {fifo, pool}, &from));  // mapped before UCX started
  SharedMapping reused = pool;
  reused.inode = 11;  // another segment at the same addresses
  CHECK(ucx_prefault_range(reused, {pool}, &from));
}

namespace {
// Writes one byte to each page after the first and returns the minor faults that took (-1 if they could not be
// read). Built without sanitizer instrumentation and calling the kernel directly: ASan's checks of each write fault
// in its own shadow pages, and its getrusage interceptor touches more, which would count here.
__attribute__((no_sanitize("address", "thread"), noinline)) long faults_writing_pages(volatile uint8_t* base,
                                                                                      size_t bytes, size_t page) {
  rusage before{};
  rusage after{};
  if (syscall(SYS_getrusage, RUSAGE_THREAD, &before) != 0) return -1;
  for (size_t at = page; at < bytes; at += page) base[at] = static_cast<uint8_t>(at / page);
  if (syscall(SYS_getrusage, RUSAGE_THREAD, &after) != 0) return -1;
  return after.ru_minflt - before.ru_minflt;
}
}  // namespace

TEST_CASE("shared mappings are listed and faulted in with their contents kept", "[transport]") {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t bytes = 64 * page;
  const int fd = memfd_create("bagua-test-prefault", 0);
  REQUIRE(fd >= 0);
  REQUIRE(ftruncate(fd, static_cast<off_t>(bytes)) == 0);
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  REQUIRE(p != MAP_FAILED);
  auto* base = static_cast<volatile uint8_t*>(p);
  const auto begin = reinterpret_cast<uintptr_t>(p);

  std::vector<SharedMapping> listed = shared_mappings();
  auto it = std::find_if(listed.begin(), listed.end(), [&](const SharedMapping& m) { return m.begin == begin; });
  REQUIRE(it != listed.end());
  CHECK(it->end == begin + bytes);
  CHECK(it->path.find("bagua-test-prefault") != std::string::npos);
  void* priv = mmap(nullptr, page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  REQUIRE(priv != MAP_FAILED);
  listed = shared_mappings();
  CHECK(std::none_of(listed.begin(), listed.end(),
                     [&](const SharedMapping& m) { return m.begin == reinterpret_cast<uintptr_t>(priv); }));

  base[0] = 0x5a;
  REQUIRE(prefault_pages(begin, begin + bytes));
  // Every page is now in this process's page tables: writing each one takes no fault.
  CHECK(faults_writing_pages(base, bytes, page) == 0);
  CHECK(base[0] == 0x5a);
  CHECK(base[page] == 1);
  CHECK(base[page + 1] == 0);
  CHECK(prefault_pages(begin, begin));  // an empty range

  munmap(priv, page);
  munmap(p, bytes);
  close(fd);
}

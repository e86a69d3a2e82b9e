// Shared mappings: a MAP_SHARED region is listed with its path, and prefault_pages puts every page of it in memory
// (mincore) without changing what it holds.
#include <catch2/catch.hpp>

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "transport/shared_mappings.h"

using namespace bagua;

TEST_CASE("shared mappings are listed and faulted in with their contents kept", "[transport]") {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t bytes = 64 * page;
  const int fd = memfd_create("bagua-test-prefault", 0);
  REQUIRE(fd >= 0);
  REQUIRE(ftruncate(fd, static_cast<off_t>(bytes)) == 0);
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  REQUIRE(p != MAP_FAILED);
  auto* base = static_cast<uint8_t*>(p);
  const auto begin = reinterpret_cast<uintptr_t>(p);

  std::vector<SharedMapping> listed = shared_mappings();
  auto it = std::find_if(listed.begin(), listed.end(), [&](const SharedMapping& m) { return m.begin == begin; });
  REQUIRE(it != listed.end());
  CHECK(it->end == begin + bytes);
  CHECK(it->path.find("bagua-test-prefault") != std::string::npos);

  // A private mapping is not listed.
  void* priv = mmap(nullptr, page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  REQUIRE(priv != MAP_FAILED);
  listed = shared_mappings();
  CHECK(std::none_of(listed.begin(), listed.end(),
                     [&](const SharedMapping& m) { return m.begin == reinterpret_cast<uintptr_t>(priv); }));

  base[0] = 0x5a;  // one page written before, the rest untouched
  std::vector<unsigned char> resident(bytes / page);
  REQUIRE(mincore(p, bytes, resident.data()) == 0);
  CHECK(std::count_if(resident.begin(), resident.end(), [](unsigned char r) { return (r & 1) == 0; }) > 0);

  REQUIRE(prefault_pages(begin, begin + bytes));
  REQUIRE(mincore(p, bytes, resident.data()) == 0);
  CHECK(std::all_of(resident.begin(), resident.end(), [](unsigned char r) { return (r & 1) == 1; }));
  CHECK(base[0] == 0x5a);
  CHECK(std::all_of(base + 1, base + bytes, [](uint8_t b) { return b == 0; }));
  CHECK(prefault_pages(begin, begin));  // an empty range

  munmap(priv, page);
  munmap(p, bytes);
  close(fd);
}

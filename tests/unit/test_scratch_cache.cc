// The scratch cache: large buffers come back for reuse, are never handed out twice while held, and the
// cache stays within its limits (8 buffers, 1 GiB).
#include <catch2/catch.hpp>

#include <cstring>
#include <set>
#include <vector>

#include "core/scratch_cache.h"

using namespace bagua;

TEST_CASE("scratch cache reuses large buffers and never shares a held one", "[scratch]") {
  release_scratch_cache();
  REQUIRE(scratch_cache_bytes() == 0);
  const size_t big = 4 << 20;
  uint8_t* first = nullptr;
  {
    auto a = take_scratch(big);
    first = a.get();
    std::memset(a.get(), 0x5a, big);  // the whole size is usable
    auto b = take_scratch(big);       // a is held: another buffer
    CHECK(b.get() != a.get());
    CHECK(scratch_cache_bytes() == 0);
  }
  CHECK(scratch_cache_bytes() == 2 * big);
  {
    auto c = take_scratch(big / 2);  // a smaller request takes a cached buffer
    CHECK(scratch_cache_bytes() == big);
    auto d = take_scratch(big);
    CHECK(scratch_cache_bytes() == 0);
    CHECK((c.get() == first || d.get() == first));
  }
  auto e = take_scratch(3 * big);  // larger than anything cached: a new buffer, the cache is untouched
  CHECK(scratch_cache_bytes() == 2 * big);
  e.reset();
  release_scratch_cache();
  CHECK(scratch_cache_bytes() == 0);
}

TEST_CASE("scratch cache leaves small buffers to malloc and keeps at most 8 buffers", "[scratch]") {
  release_scratch_cache();
  { auto small = take_scratch(1024); }
  CHECK(scratch_cache_bytes() == 0);
  {
    std::vector<std::shared_ptr<uint8_t[]>> held;
    std::set<uint8_t*> distinct;
    for (int i = 0; i < 10; ++i) {
      held.push_back(take_scratch(size_t(1 + i) << 20));
      distinct.insert(held.back().get());
    }
    CHECK(distinct.size() == 10);
  }
  // The 8 largest stay (3..10 MiB), the smallest two are freed.
  size_t expected = 0;
  for (int i = 2; i < 10; ++i) expected += size_t(1 + i) << 20;
  CHECK(scratch_cache_bytes() == expected);
  release_scratch_cache();
}

// The scratch cache: large buffers come back for reuse, are never handed out twice while held, serve
// requests of at least half their size (of equal ones, the last returned), stay within 8 buffers, and are freed
// on release (also those held at the time, when they come back).
#include <catch2/catch.hpp>

#include <cstring>
#include <set>
#include <vector>

#include "base/scratch_cache.h"

using namespace bagua;

TEST_CASE("scratch cache reuses large buffers and never shares a held one", "[scratch]") {
  release_scratch_cache();
  REQUIRE(scratch_cache_bytes() == 0);
  const size_t big = 4 << 20;
  std::set<uint8_t*> both;
  {
    auto a = take_scratch(big);
    both.insert(a.get());
    std::memset(a.get(), 0x5a, big);  // the whole size is usable
    auto b = take_scratch(big);       // a is held: another buffer
    CHECK(b.get() != a.get());
    both.insert(b.get());
    CHECK(scratch_cache_bytes() == 0);
  }
  CHECK(scratch_cache_bytes() == 2 * big);
  {
    auto c = take_scratch(big / 2);  // a smaller request takes a cached buffer
    CHECK(scratch_cache_bytes() == big);
    auto d = take_scratch(big);
    CHECK(scratch_cache_bytes() == 0);
    CHECK(std::set<uint8_t*>{c.get(), d.get()} == both);  // both came from the cache
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

TEST_CASE("scratch cache does not give a large buffer to a small request, and release frees late returns",
          "[scratch]") {
  release_scratch_cache();
  const size_t big = 8 << 20;
  { auto a = take_scratch(big); }
  CHECK(scratch_cache_bytes() == big);
  {
    auto small = take_scratch(big / 4);  // under half the cached size: a buffer of its own
    CHECK(scratch_cache_bytes() == big);
    auto half = take_scratch(big / 2);  // half: the cached one
    CHECK(scratch_cache_bytes() == 0);
  }
  auto held = take_scratch(big);
  release_scratch_cache();
  held.reset();  // comes back after the release: freed, not kept
  CHECK(scratch_cache_bytes() == 0);
  { auto again = take_scratch(big); }  // a take turns caching back on
  CHECK(scratch_cache_bytes() == big);
  release_scratch_cache();
}

TEST_CASE("scratch cache hands out the last returned of equal buffers", "[scratch]") {
  // Its pages are the ones the previous user touched; a rotation over equal buffers faulted in each one's
  // untouched part in turn (the 4-bit quantized allreduce on 2 hosts x 2 took 5-10 ms more per call).
  release_scratch_cache();
  const size_t big = 2 << 20;
  auto a = take_scratch(big), b = take_scratch(big), c = take_scratch(big);
  uint8_t* last = c.get();
  a.reset();
  b.reset();
  c.reset();
  for (int i = 0; i < 5; ++i) {
    auto again = take_scratch(big - 4096);
    CHECK(again.get() == last);
  }
  CHECK(scratch_cache_bytes() == 3 * big);
  release_scratch_cache();
}

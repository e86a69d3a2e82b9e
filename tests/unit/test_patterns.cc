// Ring rank arithmetic, alone: chunk boundaries partition any count, and a simulated ring schedule leaves
// every rank with the full reduction.
#include <catch2/catch.hpp>

#include <vector>

#include "algorithms/patterns/ring.h"
#include "algorithms/tags.h"

using namespace bagua;

TEST_CASE("ring chunks partition any count", "[patterns]") {
  for (int n = 1; n <= 9; ++n) {
    for (size_t count : {size_t(0), size_t(1), size_t(7), size_t(8), size_t(1000003), (size_t(1) << 33) + 5}) {
      size_t next_begin = 0;
      for (int c = 0; c < n; ++c) {
        CHECK(ring::chunk_begin(count, n, c) == next_begin);
        size_t size = ring::chunk_size(count, n, c);
        CHECK(size >= count / n);
        CHECK(size <= count / n + 1);
        next_begin += size;
      }
      CHECK(next_begin == count);
    }
  }
}

TEST_CASE("neighbours wrap around", "[patterns]") {
  CHECK(ring::next(3, 4) == 0);
  CHECK(ring::prev(0, 4) == 3);
  CHECK(ring::next(0, 1) == 0);
  CHECK(ring::wrap(-5, 3) == 1);
}

TEST_CASE("simulated ring reduce-scatter + allgather gives every rank the full sum", "[patterns]") {
  for (int n = 1; n <= 8; ++n) {
    // value[r][c]: rank r's copy of chunk c, as a bitmask of contributing ranks.
    std::vector<std::vector<unsigned>> value(n, std::vector<unsigned>(n));
    for (int r = 0; r < n; ++r)
      for (int c = 0; c < n; ++c) value[r][c] = 1u << r;
    for (int s = 0; s < n - 1; ++s) {
      auto before = value;
      for (int r = 0; r < n; ++r) {
        int from = ring::prev(r, n);
        int chunk = ring::reduce_scatter_recv_chunk(r, n, s);
        CHECK(chunk == ring::reduce_scatter_send_chunk(from, n, s));  // what prev sends is what r expects
        CHECK((before[r][chunk] & before[from][chunk]) == 0);         // nothing is counted twice
        value[r][chunk] = before[r][chunk] | before[from][chunk];
      }
    }
    unsigned all = (n == 32 ? ~0u : (1u << n) - 1);
    for (int r = 0; r < n; ++r) CHECK(value[r][ring::reduce_scatter_owned_chunk(r, n)] == all);
    for (int s = 0; s < n - 1; ++s) {
      auto before = value;
      for (int r = 0; r < n; ++r) {
        int from = ring::prev(r, n);
        int chunk = ring::allgather_recv_chunk(r, n, s);
        CHECK(chunk == ring::allgather_send_chunk(from, n, s));
        CHECK(before[from][chunk] == all);  // only finished chunks travel
        value[r][chunk] = before[from][chunk];
      }
    }
    for (int r = 0; r < n; ++r)
      for (int c = 0; c < n; ++c) CHECK(value[r][c] == all);
  }
}

TEST_CASE("tags keep their fields apart", "[patterns]") {
  uint64_t tag = make_tag(TagKind::kAllreduce, 0xabcdef, 0x12345, 0xfff, 0xfffff);
  CHECK(tag_kind(tag) == TagKind::kAllreduce);
  CHECK(tag_sequence(tag) == 0x2345);
  CHECK(tag_step(tag) == 0xfff);
  CHECK(tag_source(tag) == 0xfffff);
  CHECK(make_tag(TagKind::kP2P, 1, 2, 3, 4) != make_tag(TagKind::kAllreduce, 1, 2, 3, 4));
}

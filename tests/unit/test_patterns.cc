// Ring rank arithmetic, alone: chunk boundaries partition any count, and a simulated ring schedule leaves
// every rank with the full reduction.
#include <catch2/catch.hpp>

#include <vector>

#include "algorithms/patterns/ring.h"
#include "core/tags.h"

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
  uint64_t fp = call_fingerprint(TagKind::kAllreduce, BAGUA_FLOAT32, BAGUA_MAX, {12345, 6});
  uint64_t tag = make_tag(fp, 0x12345, 0xfff, 0xfffff);
  CHECK(tag_kind(tag) == TagKind::kAllreduce);
  CHECK(tag_fingerprint(tag) == fp);
  CHECK(tag_space(tag) == 2);
  CHECK(tag_sequence(tag) == 0x345);
  CHECK(tag_step(tag) == 0xfff);
  CHECK(tag_source(tag) == 0xfffff);
  uint64_t p2p = make_tag(call_fingerprint(TagKind::kP2P, BAGUA_FLOAT32, BAGUA_SUM, {}), 2, 3, 4);
  CHECK(tag_space(p2p) == 1);
  CHECK((p2p & ~kTagFingerprintMask) != (make_tag(fp, 2, 3, 4) & ~kTagFingerprintMask));  // never match
  CHECK(tag_space(make_tag(kind_only_fingerprint(TagKind::kWarmUp), 1, 0, 3)) == 0);
}

TEST_CASE("a call's fingerprint tells the calls that matter apart", "[patterns]") {
  auto fp = [](TagKind k, bagua_datatype_t t, bagua_redop_t op, CallDetails d) {
    return call_fingerprint(k, t, op, d);
  };
  const uint64_t base = fp(TagKind::kAllreduce, BAGUA_FLOAT32, BAGUA_SUM, CallDetails{1000, 0});
  // Kind, datatype and op are fields of their own: any difference shows, never by chance.
  CHECK(base != fp(TagKind::kAllreduce, BAGUA_FLOAT32, BAGUA_MAX, CallDetails{1000, 0}));
  CHECK(base != fp(TagKind::kAllreduce, BAGUA_INT32, BAGUA_SUM, CallDetails{1000, 0}));
  CHECK(base != fp(TagKind::kBroadcast, BAGUA_FLOAT32, BAGUA_SUM, CallDetails{1000, 0}));
  // What a collective does not use does not count: a broadcast has no op, a barrier no datatype.
  CHECK(fp(TagKind::kBroadcast, BAGUA_FLOAT32, BAGUA_SUM, {7, 1}) ==
        fp(TagKind::kBroadcast, BAGUA_FLOAT32, BAGUA_MAX, {7, 1}));
  CHECK(fp(TagKind::kBarrier, BAGUA_FLOAT32, BAGUA_SUM, {}) == fp(TagKind::kBarrier, BAGUA_INT8, BAGUA_MAX, {}));
  // The 7-bit check: counts less than 128 apart never share it, and of 10000 counts about 1/128 share count 1000's;
  // the rest of the details (root, algorithm, settings) about 1/128 too.
  int same = 0;
  for (uint64_t c = 0; c < 10000; ++c)
    same += fp(TagKind::kAllreduce, BAGUA_FLOAT32, BAGUA_SUM, CallDetails{c, 0}) == base;
  CHECK(same <= 10000 / 128 + 30);
  int same_rest = 0;
  for (uint64_t r = 1; r < 10000; ++r)
    same_rest += fp(TagKind::kAllreduce, BAGUA_FLOAT32, BAGUA_SUM, CallDetails{1000, mix_details(r, 3)}) == base;
  CHECK(same_rest <= 10000 / 128 + 30);
  for (uint64_t c = 1; c < 1000; ++c)
    CHECK(fp(TagKind::kAllreduce, BAGUA_FLOAT32, BAGUA_SUM, CallDetails{c, 0}) !=
          fp(TagKind::kAllreduce, BAGUA_FLOAT32, BAGUA_SUM, CallDetails{c + 1, 0}));
}

TEST_CASE("a fingerprint mismatch names both calls", "[patterns]") {
  uint64_t ours = make_tag(call_fingerprint(TagKind::kAllreduce, BAGUA_FLOAT32, BAGUA_SUM, {1, 0}), 5, 0, 1);
  uint64_t theirs = make_tag(call_fingerprint(TagKind::kAllreduce, BAGUA_FLOAT32, BAGUA_MAX, {1, 0}), 5, 0, 1);
  CHECK(describe_call_mismatch(ours, theirs, 1) ==
        "the ranks' calls differ: rank 1 called allreduce of float32 with max where this rank called allreduce of "
        "float32 with sum (they differ in the reduction op)");
  uint64_t bcast = make_tag(call_fingerprint(TagKind::kBroadcast, BAGUA_INT32, BAGUA_SUM, {1, 0}), 5, 0, 1);
  CHECK(describe_call_mismatch(ours, bcast, 1) ==
        "the ranks' calls differ: rank 1 called broadcast of int32 where this rank called allreduce of float32 with "
        "sum (they differ in the call)");
  CHECK(describe_message(bcast) == "broadcast of int32 (collective #5 mod 4096)");
  uint64_t recv = make_tag(call_fingerprint(TagKind::kP2P, BAGUA_INT32, BAGUA_SUM, {1, 0}), 0, 0, 1);
  uint64_t send = make_tag(call_fingerprint(TagKind::kP2P, BAGUA_FLOAT32, BAGUA_SUM, {1, 0}), 0, 0, 1);
  CHECK(describe_call_mismatch(recv, send, 1) ==
        "the send does not match the receive: rank 1 sent float32 where this rank receives int32 (they differ in the "
        "datatype)");
}

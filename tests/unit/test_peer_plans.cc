// The peer_memory plans (src/algorithms/<collective>/peer_memory.cc), run in one process on simulated rank memory:
// every collective, 1-5 ranks, counts 0-10, roots first and last, in and out of place (the dispatcher's in-place
// rules). Checked: every span lies within its rank's buffer; no byte is written twice; no rank reads a byte that
// another rank writes (so the ranks' plans may run in any order and at once); a reduction's result builds up only
// where its first source may be (device path); and the outputs equal the collective's exact integer result.
#include <catch2/catch.hpp>

#include <cstring>
#include <map>
#include <utility>
#include <vector>

#include "algorithms/alltoall/layout.h"
#include "algorithms/peer_memory/peer_memory.h"

using namespace bagua;

namespace {

struct RankMemory {
  std::vector<int32_t> arena;
  size_t send_at = 0, recv_at = 0;          // elements into the arena
  size_t send_extent = 0, recv_extent = 0;  // bytes
};

struct Case {
  Collective collective;
  int nranks;
  size_t count;
  int root;
  bool in_place;
  std::vector<std::vector<size_t>> sendcounts;  // alltoallv: [q][r], what q sends r
};

int32_t input(int r, size_t i) { return static_cast<int32_t>(r * 1000 + i + 1); }

std::vector<size_t> alltoallv_array(const Case& c, int r, bool send, bool displs) {
  std::vector<size_t> out(c.nranks);
  size_t at = 0;
  for (int p = 0; p < c.nranks; ++p) {
    const size_t n = send ? c.sendcounts[r][p] : c.sendcounts[p][r];
    out[p] = displs ? at : n;
    at += n + 2;  // a gap after every block
  }
  return out;
}

void run_case(const Case& c) {
  CAPTURE(collective_name(c.collective), c.nranks, c.count, c.root, c.in_place);
  const int n = c.nranks;
  const size_t e = sizeof(int32_t), block = c.count * e;
  std::vector<CollectiveArgs> args(n);
  std::vector<std::vector<size_t>> arrays(4 * n);  // alltoallv: sendcounts, sdispls, recvcounts, rdispls per rank
  std::vector<RankMemory> mem(n);
  for (int r = 0; r < n; ++r) {
    CollectiveArgs& a = args[r];
    a.collective = c.collective;
    a.count = c.count;
    a.dtype = BAGUA_INT32;
    a.op = BAGUA_SUM;
    a.root = c.root;
    size_t se = 0, re = 0;
    long send_in_recv = -1, recv_in_send = -1;  // in place: where one buffer starts inside the other (bytes)
    switch (c.collective) {
      case Collective::kAllreduce:
        se = re = block;
        send_in_recv = c.in_place ? 0 : -1;
        break;
      case Collective::kReduceScatter:
        se = n * block, re = block;
        recv_in_send = c.in_place ? r * block : -1;
        break;
      case Collective::kAllgather:
        se = block, re = n * block;
        send_in_recv = c.in_place ? r * block : -1;
        break;
      case Collective::kBroadcast:
        se = r == c.root ? block : 0, re = block;
        send_in_recv = c.in_place && r == c.root ? 0 : -1;
        break;
      case Collective::kReduce:
        se = block, re = r == c.root ? block : 0;
        send_in_recv = c.in_place && r == c.root ? 0 : -1;
        break;
      case Collective::kAlltoall: se = re = n * block; break;
      case Collective::kAlltoallv: {
        for (int k = 0; k < 4; ++k) arrays[4 * r + k] = alltoallv_array(c, r, k < 2, k % 2 == 1);
        a.sendcounts = arrays[4 * r].data(), a.sdispls = arrays[4 * r + 1].data();
        a.recvcounts = arrays[4 * r + 2].data(), a.rdispls = arrays[4 * r + 3].data();
        se = (a.sdispls[n - 1] + a.sendcounts[n - 1]) * e, re = (a.rdispls[n - 1] + a.recvcounts[n - 1]) * e;
        break;
      }
      case Collective::kGather:
        se = block, re = r == c.root ? n * block : 0;
        send_in_recv = c.in_place && r == c.root ? r * block : -1;
        break;
      case Collective::kScatter:
        se = r == c.root ? n * block : 0, re = block;
        recv_in_send = c.in_place && r == c.root ? r * block : -1;
        break;
      default: FAIL("no plan");
    }
    RankMemory& m = mem[r];
    m.send_extent = se, m.recv_extent = re;
    if (send_in_recv >= 0) {
      m.recv_at = 0, m.send_at = send_in_recv / e;
      m.arena.assign(re / e, -7);
    } else if (recv_in_send >= 0) {
      m.send_at = 0, m.recv_at = recv_in_send / e;
      m.arena.assign(se / e, -7);
    } else {
      m.send_at = 0, m.recv_at = se / e + 3;
      m.arena.assign(m.recv_at + re / e, -7);
    }
    for (size_t i = 0; i < se / e; ++i) m.arena[m.send_at + i] = input(r, i);
    a.send_extent = se, a.recv_extent = re;
  }
  // Each rank's plan, from its own call and what its peers' calls say about it.
  std::vector<PeerPlan> plans;
  for (int r = 0; r < n; ++r) {
    PeerCallFacts call{r, n, args[r], std::vector<size_t>(n), std::vector<size_t>(n)};
    for (int q = 0; q < n; ++q) {
      const AlltoallLayout l = alltoall_layout(args[q], n);
      if (c.collective == Collective::kAlltoall || c.collective == Collective::kAlltoallv)
        call.offset_for_me[q] = l.send_off(r), call.bytes_for_me[q] = l.send_bytes(r);
    }
    switch (c.collective) {
      case Collective::kAllreduce: plans.push_back(allreduce_peer_plan(call)); break;
      case Collective::kReduceScatter: plans.push_back(reduce_scatter_peer_plan(call)); break;
      case Collective::kAllgather: plans.push_back(allgather_peer_plan(call)); break;
      case Collective::kBroadcast: plans.push_back(broadcast_peer_plan(call)); break;
      case Collective::kReduce: plans.push_back(reduce_peer_plan(call)); break;
      case Collective::kGather: plans.push_back(gather_peer_plan(call)); break;
      case Collective::kScatter: plans.push_back(scatter_peer_plan(call)); break;
      default: plans.push_back(alltoall_peer_plan(call)); break;
    }
  }
  // Bounds, then who writes and reads which element (rank, arena index).
  auto at = [&](const PeerSpan& s, size_t bytes) {
    const RankMemory& m = mem[s.rank];
    const size_t extent = s.buffer == PeerBufferKind::kSend ? m.send_extent : m.recv_extent;
    REQUIRE(s.offset % e == 0);
    REQUIRE(s.offset + bytes <= extent);
    return (s.buffer == PeerBufferKind::kSend ? m.send_at : m.recv_at) + s.offset / e;
  };
  std::map<std::pair<int, size_t>, int> writer;
  std::vector<std::pair<int, std::pair<int, size_t>>> reads;  // (reader, element)
  auto write = [&](int rank, const PeerSpan& s, size_t bytes) {
    const size_t first = at(s, bytes);
    for (size_t i = 0; i < bytes / e; ++i) REQUIRE(writer.emplace(std::make_pair(s.rank, first + i), rank).second);
  };
  auto read = [&](int rank, const PeerSpan& s, size_t bytes) {
    const size_t first = at(s, bytes);
    for (size_t i = 0; i < bytes / e; ++i) reads.push_back({rank, {s.rank, first + i}});
  };
  auto same = [&](const PeerSpan& x, const PeerSpan& y, size_t bytes) {
    return x.rank == y.rank && at(x, bytes) == at(y, bytes);
  };
  for (int r = 0; r < n; ++r) {
    for (const PeerCopy& cp : plans[r].copies) {
      REQUIRE((cp.to.rank == r || cp.from.rank == r));  // one side is the rank's own (cross-memory attach)
      if (same(cp.to, cp.from, cp.bytes)) continue;     // in place already
      write(r, cp.to, cp.bytes);
      read(r, cp.from, cp.bytes);
    }
    for (const PeerReduce& red : plans[r].reductions) {
      const size_t bytes = red.count * e;
      for (const PeerSpan& d : red.destinations) write(r, d, bytes);
      for (size_t k = 0; k < red.sources.size(); ++k) {
        read(r, red.sources[k], bytes);
        if (k > 0) REQUIRE_FALSE(same(red.sources[k], red.destinations[0], bytes));
      }
    }
  }
  for (const auto& [reader, element] : reads) {
    auto w = writer.find(element);
    if (w != writer.end()) REQUIRE(w->second == reader);
  }
  // Run the ranks' plans one after another.
  auto ptr = [&](const PeerSpan& s, size_t bytes) { return mem[s.rank].arena.data() + at(s, bytes); };
  for (int r = 0; r < n; ++r) {
    for (const PeerCopy& cp : plans[r].copies) std::memmove(ptr(cp.to, cp.bytes), ptr(cp.from, cp.bytes), cp.bytes);
    for (const PeerReduce& red : plans[r].reductions) {
      const size_t bytes = red.count * e;
      int32_t* acc = ptr(red.destinations[0], bytes);
      std::memmove(acc, ptr(red.sources[0], bytes), bytes);
      for (size_t k = 1; k < red.sources.size(); ++k)
        for (size_t i = 0; i < red.count; ++i) acc[i] += ptr(red.sources[k], bytes)[i];
      for (size_t d = 1; d < red.destinations.size(); ++d) std::memmove(ptr(red.destinations[d], bytes), acc, bytes);
    }
  }
  // The collective's result.
  auto sum = [&](size_t i) {
    int32_t s = 0;
    for (int q = 0; q < n; ++q) s += input(q, i);
    return s;
  };
  for (int r = 0; r < n; ++r) {
    const RankMemory& m = mem[r];
    const int32_t* out = m.arena.data() + m.recv_at;
    const size_t c_ = c.count;
    for (size_t i = 0; i < m.recv_extent / e; ++i) {
      CAPTURE(r, i);
      const size_t q = c_ ? i / c_ : 0, j = c_ ? i % c_ : 0;
      switch (c.collective) {
        case Collective::kAllreduce:
        case Collective::kReduce: CHECK(out[i] == sum(i)); break;
        case Collective::kReduceScatter: CHECK(out[i] == sum(r * c_ + i)); break;
        case Collective::kAllgather:
        case Collective::kGather: CHECK(out[i] == input(static_cast<int>(q), j)); break;
        case Collective::kBroadcast: CHECK(out[i] == input(c.root, i)); break;
        case Collective::kScatter: CHECK(out[i] == input(c.root, r * c_ + i)); break;
        case Collective::kAlltoall: CHECK(out[i] == input(static_cast<int>(q), r * c_ + j)); break;
        default: break;
      }
    }
    if (c.collective == Collective::kAlltoallv)
      for (int q = 0; q < n; ++q) {
        const std::vector<size_t> q_sdispls = alltoallv_array(c, q, true, true);
        for (size_t i = 0; i < c.sendcounts[q][r]; ++i)
          CHECK(out[args[r].rdispls[q] + i] == input(q, q_sdispls[r] + i));
        if (q + 1 < n) CHECK(out[args[r].rdispls[q] + c.sendcounts[q][r]] == -7);  // the gap after the block
      }
  }
}

}  // namespace

TEST_CASE("peer_memory plans: in bounds, one writer per byte, no rank reads another's writes, exact results") {
  const Collective with_in_place[] = {Collective::kAllreduce, Collective::kReduceScatter, Collective::kAllgather,
                                      Collective::kBroadcast, Collective::kReduce,        Collective::kGather,
                                      Collective::kScatter};
  for (int n = 1; n <= 5; ++n)
    for (size_t count : {0, 1, 7, 10})
      for (int root : {0, n - 1}) {
        for (Collective c : with_in_place)
          for (bool in_place : {false, true}) run_case({c, n, count, root, in_place, {}});
        run_case({Collective::kAlltoall, n, count, root, false, {}});
        Case v{Collective::kAlltoallv, n, count, root, false, std::vector<std::vector<size_t>>(n)};
        for (int q = 0; q < n; ++q)
          for (int r = 0; r < n; ++r) v.sendcounts[q].push_back((count + 3 * q + r) % 5);  // zeros included
        run_case(v);
      }
}

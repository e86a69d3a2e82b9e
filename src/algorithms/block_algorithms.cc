// Collectives over per-rank blocks: reduce_scatter, allgather, alltoall(v), gather, scatter.
// Block b of a buffer holds rank b's part; ring steps use patterns/ring.h.
#include <algorithm>
#include <functional>

#include "algorithms/block_layout.h"
#include "algorithms/collectives.h"
#include "algorithms/patterns/recursive.h"
#include "algorithms/patterns/ring.h"
#include "kernels/dtype.h"

namespace bagua {

void ring_reduce_scatter_rounds(Schedule& s, const BlockLayout& blocks, const uint8_t* src, uint8_t* out) {
  const ScheduleContext& ctx = s.context();
  const int n = ctx.nranks, r = ctx.rank;
  if (n == 1) {
    s.prologue().push_back(copy_step(out, src + blocks.offset_bytes(r), blocks.bytes(r)));
    return;
  }
  size_t largest = 0;
  for (int b = 0; b < n; ++b) largest = std::max(largest, blocks.bytes(b));
  uint8_t* tmp = s.scratch(largest);
  uint8_t* acc[2] = {s.scratch(largest), s.scratch(largest)};
  const int next = ctx.ring_next(), prev = ctx.ring_prev(), pos = ctx.ring_position();
  // Step k sends the block of ring position pos-k-1 and receives that of pos-k-2, so each rank ends owning
  // its own block (blocks belong to ranks; the ring visits ranks in ring order).
  for (int k = 0; k < n - 1; ++k) {
    int send_block = ctx.ring_rank(ring::wrap(pos - k - 1, n));
    int recv_block = ctx.ring_rank(ring::wrap(pos - k - 2, n));
    Round& round = s.round();
    const uint8_t* send_data = k == 0 ? src + blocks.offset_bytes(send_block) : acc[(k - 1) % 2];
    round.recvs.push_back({prev, tmp, blocks.bytes(recv_block)});
    round.sends.push_back({next, send_data, blocks.bytes(send_block)});
    uint8_t* dst = k == n - 2 ? out : acc[k % 2];
    round.after.push_back(reduce_step(dst, tmp, src + blocks.offset_bytes(recv_block), blocks.count(recv_block)));
  }
}

std::unique_ptr<Schedule> reduce_scatter_ring(const CollectiveArgs& a, const ScheduleContext& ctx) {
  auto s = std::make_unique<Schedule>(ctx);
  BlockLayout blocks = BlockLayout::uniform(a.count, ctx.nranks, a.dtype);
  auto* out = static_cast<uint8_t*>(a.recvbuf);
  ring_reduce_scatter_rounds(*s, blocks, static_cast<const uint8_t*>(a.sendbuf), out);
  if (a.op == BAGUA_AVG) {
    s->then(divide_step(out, a.count));
  }
  return s;
}

std::unique_ptr<Schedule> reduce_scatter_direct(const CollectiveArgs& a, const ScheduleContext& ctx) {
  auto s = std::make_unique<Schedule>(ctx);
  const int n = ctx.nranks, r = ctx.rank;
  BlockLayout blocks = BlockLayout::uniform(a.count, n, a.dtype);
  auto* src = static_cast<const uint8_t*>(a.sendbuf);
  auto* out = static_cast<uint8_t*>(a.recvbuf);
  size_t bytes = blocks.bytes(0);
  // Every contribution to block r lands in scratch (ours copied), then is combined in rank order.
  uint8_t* parts = s->scratch(bytes * n);
  s->prologue().push_back(copy_step(parts + r * bytes, src + blocks.offset_bytes(r), bytes));
  if (n > 1) {
    Round& round = s->round();
    for (int peer = 0; peer < n; ++peer) {
      if (peer == r) continue;
      round.recvs.push_back({peer, parts + peer * bytes, bytes});
      round.sends.push_back({peer, src + blocks.offset_bytes(peer), bytes});
    }
  }
  std::vector<LocalStep>& steps = n > 1 ? s->last().after : s->prologue();
  if (n == 1) steps.push_back(copy_step(out, parts, bytes));
  for (int peer = 1; peer < n; ++peer)
    steps.push_back(reduce_step(out, peer == 1 ? parts : out, parts + peer * bytes, a.count));
  if (a.op == BAGUA_AVG) steps.push_back(divide_step(out, a.count));
  return s;
}

namespace {
// Allgather: our block goes into place first unless it is already there (in place).
uint8_t* allgather_prologue(Schedule& s, const CollectiveArgs& a, const BlockLayout& blocks) {
  auto* out = static_cast<uint8_t*>(a.recvbuf);
  s.prologue().push_back(copy_step(out + blocks.offset_bytes(s.context().rank), a.sendbuf, blocks.bytes(0)));
  return out;
}
}  // namespace

std::unique_ptr<Schedule> allgather_ring(const CollectiveArgs& a, const ScheduleContext& ctx) {
  auto s = std::make_unique<Schedule>(ctx);
  const int n = ctx.nranks;
  BlockLayout blocks = BlockLayout::uniform(a.count, n, a.dtype);
  uint8_t* out = allgather_prologue(*s, a, blocks);
  const int pos = ctx.ring_position();
  for (int k = 0; k < n - 1; ++k) {
    int send_block = ctx.ring_rank(ring::wrap(pos - k, n)), recv_block = ctx.ring_rank(ring::wrap(pos - k - 1, n));
    Round& round = s->round();
    round.recvs.push_back({ctx.ring_prev(), out + blocks.offset_bytes(recv_block), blocks.bytes(recv_block)});
    round.sends.push_back({ctx.ring_next(), out + blocks.offset_bytes(send_block), blocks.bytes(send_block)});
  }
  return s;
}

std::unique_ptr<Schedule> allgather_recursive_doubling(const CollectiveArgs& a, const ScheduleContext& ctx) {
  auto s = std::make_unique<Schedule>(ctx);
  const int n = ctx.nranks, r = ctx.rank;  // n is a power of two (algorithm_supports)
  BlockLayout blocks = BlockLayout::uniform(a.count, n, a.dtype);
  uint8_t* out = allgather_prologue(*s, a, blocks);
  int lo = r, width = 1;
  for (int distance = 1; distance < n; distance *= 2) {
    int partner = r ^ distance;
    int other_lo = (r & distance) == 0 ? lo + width : lo - width;
    Round& round = s->round();
    round.recvs.push_back({partner, out + blocks.offset_bytes(other_lo), blocks.bytes(0) * width});
    round.sends.push_back({partner, out + blocks.offset_bytes(lo), blocks.bytes(0) * width});
    lo = std::min(lo, other_lo);
    width *= 2;
  }
  return s;
}

std::unique_ptr<Schedule> allgather_direct(const CollectiveArgs& a, const ScheduleContext& ctx) {
  auto s = std::make_unique<Schedule>(ctx);
  const int n = ctx.nranks, r = ctx.rank;
  BlockLayout blocks = BlockLayout::uniform(a.count, n, a.dtype);
  uint8_t* out = allgather_prologue(*s, a, blocks);
  if (n == 1) return s;
  Round& round = s->round();
  for (int peer = 0; peer < n; ++peer) {
    if (peer == r) continue;
    round.recvs.push_back({peer, out + blocks.offset_bytes(peer), blocks.bytes(peer)});
    round.sends.push_back({peer, out + blocks.offset_bytes(r), blocks.bytes(r)});
  }
  return s;
}

namespace {
// Where alltoall / alltoallv put block `peer` (bytes), on the send and receive side.
struct AlltoallLayout {
  std::function<size_t(int)> send_off, send_bytes, recv_off, recv_bytes;
};

AlltoallLayout alltoall_layout(const CollectiveArgs& a, int n) {
  size_t es = datatype_size(a.dtype);
  if (a.collective == Collective::kAlltoallv)
    return {[=](int p) { return a.sdispls[p] * es; }, [=](int p) { return a.sendcounts[p] * es; },
            [=](int p) { return a.rdispls[p] * es; }, [=](int p) { return a.recvcounts[p] * es; }};
  size_t block = a.count * es;
  (void)n;
  return {[=](int p) { return p * block; }, [=](int) { return block; }, [=](int p) { return p * block; },
          [=](int) { return block; }};
}
}  // namespace

std::unique_ptr<Schedule> alltoall_direct(const CollectiveArgs& a, const ScheduleContext& ctx) {
  auto s = std::make_unique<Schedule>(ctx);
  const int n = ctx.nranks, r = ctx.rank;
  AlltoallLayout l = alltoall_layout(a, n);
  auto* src = static_cast<const uint8_t*>(a.sendbuf);
  auto* out = static_cast<uint8_t*>(a.recvbuf);
  s->prologue().push_back(copy_step(out + l.recv_off(r), src + l.send_off(r), l.send_bytes(r)));
  if (n == 1) return s;
  Round& round = s->round();
  for (int peer = 0; peer < n; ++peer) {
    if (peer == r) continue;
    round.recvs.push_back({peer, out + l.recv_off(peer), l.recv_bytes(peer)});
    round.sends.push_back({peer, src + l.send_off(peer), l.send_bytes(peer)});
  }
  return s;
}

std::unique_ptr<Schedule> alltoall_pairwise(const CollectiveArgs& a, const ScheduleContext& ctx) {
  auto s = std::make_unique<Schedule>(ctx);
  const int n = ctx.nranks, r = ctx.rank;
  AlltoallLayout l = alltoall_layout(a, n);
  auto* src = static_cast<const uint8_t*>(a.sendbuf);
  auto* out = static_cast<uint8_t*>(a.recvbuf);
  s->prologue().push_back(copy_step(out + l.recv_off(r), src + l.send_off(r), l.send_bytes(r)));
  for (int k = 1; k < n; ++k) {
    int to = (r + k) % n, from = (r - k + n) % n;
    Round& round = s->round();
    round.recvs.push_back({from, out + l.recv_off(from), l.recv_bytes(from)});
    round.sends.push_back({to, src + l.send_off(to), l.send_bytes(to)});
  }
  return s;
}

std::unique_ptr<Schedule> gather_direct(const CollectiveArgs& a, const ScheduleContext& ctx) {
  auto s = std::make_unique<Schedule>(ctx);
  const int n = ctx.nranks, r = ctx.rank;
  BlockLayout blocks = BlockLayout::uniform(a.count, n, a.dtype);
  if (n > 1) s->round();
  if (r == a.root) {
    auto* out = static_cast<uint8_t*>(a.recvbuf);
    s->prologue().push_back(copy_step(out + blocks.offset_bytes(r), a.sendbuf, blocks.bytes(r)));
    for (int peer = 0; peer < n; ++peer)
      if (peer != r) s->last().recvs.push_back({peer, out + blocks.offset_bytes(peer), blocks.bytes(peer)});
  } else {
    s->last().sends.push_back({a.root, a.sendbuf, blocks.bytes(r)});
  }
  return s;
}

std::unique_ptr<Schedule> scatter_direct(const CollectiveArgs& a, const ScheduleContext& ctx) {
  auto s = std::make_unique<Schedule>(ctx);
  const int n = ctx.nranks, r = ctx.rank;
  BlockLayout blocks = BlockLayout::uniform(a.count, n, a.dtype);
  if (n > 1) s->round();
  if (r == a.root) {
    auto* src = static_cast<const uint8_t*>(a.sendbuf);
    s->prologue().push_back(copy_step(a.recvbuf, src + blocks.offset_bytes(r), blocks.bytes(r)));
    for (int peer = 0; peer < n; ++peer)
      if (peer != r) s->last().sends.push_back({peer, src + blocks.offset_bytes(peer), blocks.bytes(peer)});
  } else {
    s->last().recvs.push_back({a.root, a.recvbuf, blocks.bytes(r)});
  }
  return s;
}

}  // namespace bagua

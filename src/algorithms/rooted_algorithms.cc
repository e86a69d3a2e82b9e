// Rooted collectives (broadcast, reduce) on binomial trees and their large-message forms, and the barrier.
#include "algorithms/block_layout.h"
#include "algorithms/collectives.h"
#include "algorithms/patterns/binomial.h"
#include "algorithms/patterns/ring.h"
#include "kernels/dtype.h"

namespace bagua {

std::unique_ptr<Schedule> broadcast_tree(const CollectiveArgs& a, const ScheduleContext& ctx) {
  auto s = std::make_unique<Schedule>(ctx);
  const int n = ctx.nranks;
  size_t bytes = a.count * datatype_size(a.dtype);
  auto* buf = static_cast<uint8_t*>(a.recvbuf);
  if (ctx.rank == a.root) s->prologue().push_back(copy_step(buf, a.sendbuf, bytes));
  int vr = binomial::relative(ctx.rank, a.root, n);
  for (int i = 0; i < binomial::ceil_log2(n); ++i) {
    int mask = binomial::broadcast_mask(i, n);
    Round& round = s->round();
    if (int from = binomial::receive_from(vr, mask); from >= 0)
      round.recvs.push_back({binomial::absolute(from, a.root, n), buf, bytes});
    if (int to = binomial::send_to(vr, mask, n); to >= 0)
      round.sends.push_back({binomial::absolute(to, a.root, n), buf, bytes});
  }
  return s;
}

// Van de Geijn: a binomial scatter of n chunks (in relative-rank order), then a ring allgather.
std::unique_ptr<Schedule> broadcast_scatter_allgather(const CollectiveArgs& a, const ScheduleContext& ctx) {
  auto s = std::make_unique<Schedule>(ctx);
  const int n = ctx.nranks;
  BlockLayout chunks = BlockLayout::balanced(a.count, n, a.dtype);
  auto* buf = static_cast<uint8_t*>(a.recvbuf);
  if (ctx.rank == a.root) s->prologue().push_back(copy_step(buf, a.sendbuf, a.count * datatype_size(a.dtype)));
  int vr = binomial::relative(ctx.rank, a.root, n);
  auto span_bytes = [&](int first, int last) {  // relative chunks [first, last)
    last = std::min(last, n);
    return chunks.offset_bytes(last - 1) + chunks.bytes(last - 1) - chunks.offset_bytes(first);
  };
  for (int i = 0; i < binomial::ceil_log2(n); ++i) {
    int mask = binomial::broadcast_mask(i, n);
    Round& round = s->round();
    if (int from = binomial::receive_from(vr, mask); from >= 0)
      round.recvs.push_back(
          {binomial::absolute(from, a.root, n), buf + chunks.offset_bytes(vr), span_bytes(vr, vr + mask)});
    if (int to = binomial::send_to(vr, mask, n); to >= 0)
      round.sends.push_back(
          {binomial::absolute(to, a.root, n), buf + chunks.offset_bytes(to), span_bytes(to, to + mask)});
  }
  // Ring allgather in relative ranks (ring neighbours are the same in absolute ranks).
  for (int k = 0; k < n - 1; ++k) {
    int send_chunk = ring::wrap(vr - k, n), recv_chunk = ring::wrap(vr - k - 1, n);
    Round& round = s->round();
    round.recvs.push_back({ring::prev(ctx.rank, n), buf + chunks.offset_bytes(recv_chunk), chunks.bytes(recv_chunk)});
    round.sends.push_back({ring::next(ctx.rank, n), buf + chunks.offset_bytes(send_chunk), chunks.bytes(send_chunk)});
  }
  return s;
}

std::unique_ptr<Schedule> reduce_tree(const CollectiveArgs& a, const ScheduleContext& ctx) {
  auto s = std::make_unique<Schedule>(ctx);
  const int n = ctx.nranks;
  size_t bytes = a.count * datatype_size(a.dtype);
  // The root accumulates in recvbuf, the others in scratch (their recvbuf may be NULL).
  auto* acc = ctx.rank == a.root ? static_cast<uint8_t*>(a.recvbuf) : s->scratch(bytes);
  s->prologue().push_back(copy_step(acc, a.sendbuf, bytes));
  uint8_t* tmp = n > 1 ? s->scratch(bytes) : nullptr;
  int vr = binomial::relative(ctx.rank, a.root, n);
  const int levels = binomial::ceil_log2(n);
  for (int i = levels - 1; i >= 0; --i) {  // broadcast rounds, backwards
    int mask = binomial::broadcast_mask(i, n);
    Round& round = s->round();
    if (int child = binomial::send_to(vr, mask, n); child >= 0) {
      round.recvs.push_back({binomial::absolute(child, a.root, n), tmp, bytes});
      round.after.push_back(reduce_step(acc, acc, tmp, a.count));  // our (lower relative rank) data first
    }
    if (int parent = binomial::receive_from(vr, mask); parent >= 0)
      round.sends.push_back({binomial::absolute(parent, a.root, n), acc, bytes});
  }
  if (ctx.rank == a.root && a.op == BAGUA_AVG) {
    s->then(divide_step(acc, a.count));
  }
  return s;
}

// Large reduce: ring reduce-scatter of balanced blocks, then every owner sends its block to the root.
std::unique_ptr<Schedule> reduce_scatter_gather(const CollectiveArgs& a, const ScheduleContext& ctx) {
  auto s = std::make_unique<Schedule>(ctx);
  const int n = ctx.nranks, r = ctx.rank;
  BlockLayout blocks = BlockLayout::balanced(a.count, n, a.dtype);
  bool at_root = r == a.root;
  uint8_t* own = at_root ? static_cast<uint8_t*>(a.recvbuf) + blocks.offset_bytes(r) : s->scratch(blocks.bytes(r));
  // In place at the root is safe: the gather writes into recvbuf only after the ring has read sendbuf.
  const uint8_t* src = static_cast<const uint8_t*>(a.sendbuf);
  ring_reduce_scatter_rounds(*s, blocks, src, own);
  if (a.op == BAGUA_AVG) {
    s->then(divide_step(own, blocks.count(r)));
  }
  if (n > 1) {
    Round& round = s->round();
    if (at_root) {
      auto* out = static_cast<uint8_t*>(a.recvbuf);
      for (int peer = 0; peer < n; ++peer)
        if (peer != r) round.recvs.push_back({peer, out + blocks.offset_bytes(peer), blocks.bytes(peer)});
    } else {
      round.sends.push_back({a.root, own, blocks.bytes(r)});
    }
  }
  return s;
}

// Binomial reduce to rank 0, then binomial broadcast from it: 2 log2(n) rounds of the whole vector.
std::unique_ptr<Schedule> allreduce_tree(const CollectiveArgs& a, const ScheduleContext& ctx) {
  CollectiveArgs reduce_args = a;
  reduce_args.root = 0;
  reduce_args.op = a.op == BAGUA_AVG ? BAGUA_AVG : a.op;
  std::unique_ptr<Schedule> s = reduce_tree(reduce_args, ctx);  // rank 0 ends with the result in recvbuf
  // Everyone else accumulated in scratch; the broadcast delivers the result into recvbuf.
  CollectiveArgs bcast_args = a;
  bcast_args.root = 0;
  bcast_args.sendbuf = a.recvbuf;
  std::unique_ptr<Schedule> b = broadcast_tree(bcast_args, ctx);
  for (Round& round : b->rounds()) s->rounds().push_back(std::move(round));
  return s;
}

// Dissemination barrier: round k signals rank + 2^k and waits for rank - 2^k.
std::unique_ptr<Schedule> barrier_dissemination(const CollectiveArgs&, const ScheduleContext& ctx) {
  auto s = std::make_unique<Schedule>(ctx);
  static uint8_t token;
  const int n = ctx.nranks;
  for (int distance = 1; distance < n; distance *= 2) {
    Round& round = s->round();
    round.recvs.push_back({ring::wrap(ctx.rank - distance, n), &token, 0});
    round.sends.push_back({ring::wrap(ctx.rank + distance, n), &token, 0});
  }
  return s;
}

}  // namespace bagua

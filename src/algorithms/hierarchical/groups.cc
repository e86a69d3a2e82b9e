#include "algorithms/hierarchical/groups.h"

#include <algorithm>

#include "algorithms/patterns/binomial.h"
#include "algorithms/patterns/ring.h"
#include "kernels/dtype.h"

namespace bagua {

Place place_of(const ScheduleContext& ctx, int rank) {
  for (int h = 0; h < static_cast<int>(ctx.hosts().size()); ++h)
    for (int l = 0; l < static_cast<int>(ctx.hosts()[h].size()); ++l)
      if (ctx.hosts()[h][l] == rank) return {h, l};
  return {};
}

// Rounds of a ring phase over `group` (this rank at index `me`), padded to `rounds` in total.
void pad_to(Schedule& s, size_t start, size_t rounds) {
  while (s.rounds().size() < start + rounds) s.round();
}

// Ring reduce-scatter over a group: member i ends with block i of `blocks` (over `src`) reduced into out.
void group_reduce_scatter(Schedule& s, const std::vector<int>& group, int me, const BlockLayout& blocks,
                          const uint8_t* src, uint8_t* out, size_t pad_rounds) {
  size_t start = s.rounds().size();
  const int g = static_cast<int>(group.size());
  if (g > 1) {
    size_t largest = 0;
    for (int b = 0; b < g; ++b) largest = std::max(largest, blocks.bytes(b));
    uint8_t* tmp = s.scratch(largest);
    uint8_t* acc[2] = {s.scratch(largest), s.scratch(largest)};
    int next = group[(me + 1) % g], prev = group[(me + g - 1) % g];
    for (int k = 0; k < g - 1; ++k) {
      int send_block = ring::wrap(me - k - 1, g), recv_block = ring::wrap(me - k - 2, g);
      Round& round = s.round();
      round.recvs.push_back({prev, tmp, blocks.bytes(recv_block)});
      round.sends.push_back(
          {next, k == 0 ? src + blocks.offset_bytes(send_block) : acc[(k - 1) % 2], blocks.bytes(send_block)});
      uint8_t* dst = k == g - 2 ? out : acc[k % 2];
      round.after.push_back(reduce_step(dst, tmp, src + blocks.offset_bytes(recv_block), blocks.count(recv_block)));
    }
  } else {
    s.then(copy_step(out, src + blocks.offset_bytes(me), blocks.bytes(me)));
  }
  pad_to(s, start, pad_rounds);
}

// Ring allgather over a group: member i holds block i of `region`; afterwards everyone holds all.
void group_allgather(Schedule& s, const std::vector<int>& group, int me, const BlockLayout& blocks, uint8_t* region,
                     size_t pad_rounds) {
  size_t start = s.rounds().size();
  const int g = static_cast<int>(group.size());
  int next = group[(me + 1) % g], prev = group[(me + g - 1) % g];
  for (int k = 0; k < g - 1; ++k) {
    int send_block = ring::wrap(me - k, g), recv_block = ring::wrap(me - k - 1, g);
    Round& round = s.round();
    round.recvs.push_back({prev, region + blocks.offset_bytes(recv_block), blocks.bytes(recv_block)});
    round.sends.push_back({next, region + blocks.offset_bytes(send_block), blocks.bytes(send_block)});
  }
  pad_to(s, start, pad_rounds);
}

// Pieces each block of a group allreduce moves in: one, or (pipelined) at least 512 KiB each, at most 16.
int group_pieces(size_t count, int g, bagua_datatype_t dtype, bool pipelined) {
  if (!pipelined) return 1;
  BlockLayout sub = BlockLayout::balanced(count, std::max(g, 1), dtype);
  return static_cast<int>(std::min<size_t>(16, std::max<size_t>(1, sub.bytes(0) / kPieceMinBytes)));
}

// Rounds of group_allreduce for a group of g (every rank, member or not, can compute it).
size_t group_allreduce_rounds(size_t count, int g, bagua_datatype_t dtype, bool pipelined) {
  return g > 1 ? static_cast<size_t>(2 * g - 3 + group_pieces(count, g, dtype, pipelined)) : 0;
}

// Ring allreduce of `count` elements at `buf` (in place) among `group`, pipelined in pieces: piece p of
// reduce-scatter step s moves in round s + p and is added in right after it; piece p of allgather step s
// moves in round (g - 1) + s + p. Between two ranks a round carries at most one piece per step, and each
// link one stream. Avg divides each owner's pieces once they are complete. Unpipelined, it is the plain ring
// (2(g-1) rounds, one block per round).
void group_allreduce(Schedule& s, const std::vector<int>& group, int me, uint8_t* buf, size_t count,
                     const CollectiveArgs& a, bool pipelined) {
  const int g = static_cast<int>(group.size());
  if (g <= 1) {
    if (a.op == BAGUA_AVG && g == 1) s.then(divide_step(buf, count));
    return;
  }
  const size_t elem = datatype_size(a.dtype);
  BlockLayout sub = BlockLayout::balanced(count, g, a.dtype);
  const int pieces = group_pieces(count, g, a.dtype, pipelined);
  const size_t first = s.rounds().size(), total = group_allreduce_rounds(count, g, a.dtype, pipelined);
  pad_to(s, first, total);
  auto round = [&](size_t t) -> Round& { return s.rounds()[first + t]; };
  auto piece = [&](int block, int p) {  // elements [e0, e1) of block `block` in piece p
    size_t n = sub.count(block);
    return std::make_pair(sub.offset(block) + n * p / pieces, sub.offset(block) + n * (p + 1) / pieces);
  };
  const int next = group[(me + 1) % g], prev = group[(me + g - 1) % g];
  // Each round waits on one piece per step: pieces go eagerly (a rendezvous handshake per piece took the
  // rail from 152 to 177 ms at 16 MiB on the test bed, 2x2 at 1 Gbit/s).
  const SendMode mode = pipelined ? SendMode::kEager : SendMode::kDefault;
  size_t largest = 0;
  for (int b = 0; b < g; ++b) largest = std::max(largest, sub.bytes(b));
  for (int step = 0; step < g - 1; ++step) {  // reduce-scatter
    const int send_block = ring::wrap(me - step - 1, g), recv_block = ring::wrap(me - step - 2, g);
    uint8_t* tmp = s.scratch(largest);
    for (int p = 0; p < pieces; ++p) {
      Round& r = round(step + p);
      auto [s0, s1] = piece(send_block, p);
      auto [r0, r1] = piece(recv_block, p);
      if (s1 > s0) r.sends.push_back({next, buf + s0 * elem, (s1 - s0) * elem, mode});
      uint8_t* at = tmp + (r0 - sub.offset(recv_block)) * elem;
      if (r1 > r0) {
        r.recvs.push_back({prev, at, (r1 - r0) * elem});
        r.after.push_back(reduce_step(buf + r0 * elem, buf + r0 * elem, at, r1 - r0));
        if (step == g - 2 && a.op == BAGUA_AVG) r.after.push_back(divide_step(buf + r0 * elem, r1 - r0));
      }
    }
  }
  for (int step = 0; step < g - 1; ++step) {  // allgather
    const int send_block = ring::wrap(me - step, g), recv_block = ring::wrap(me - step - 1, g);
    for (int p = 0; p < pieces; ++p) {
      Round& r = round(g - 1 + step + p);
      auto [s0, s1] = piece(send_block, p);
      auto [r0, r1] = piece(recv_block, p);
      if (s1 > s0) r.sends.push_back({next, buf + s0 * elem, (s1 - s0) * elem, mode});
      if (r1 > r0) r.recvs.push_back({prev, buf + r0 * elem, (r1 - r0) * elem});
    }
  }
}

// Leader of each host: the first rank, or `root` on the root's host.
std::vector<int> leaders(const ScheduleContext& ctx, int root) {
  std::vector<int> out;
  for (const auto& h : ctx.hosts())
    out.push_back(root >= 0 && std::find(h.begin(), h.end(), root) != h.end() ? root : h.front());
  return out;
}

// One round: every non-leader of each host sends `bytes` at `data` to its leader, which receives them into
// `slots` (slot l for local index l). Hosts without other ranks idle.
void gather_to_leader(Schedule& s, const ScheduleContext& ctx, int leader, const std::vector<int>& host,
                      const uint8_t* data, size_t bytes, uint8_t* slots, size_t slot_stride) {
  Round& round = s.round();
  if (ctx.rank == leader) {
    for (size_t l = 0; l < host.size(); ++l)
      if (host[l] != leader) round.recvs.push_back({host[l], slots + l * slot_stride, bytes});
  } else {
    round.sends.push_back({leader, data, bytes});
  }
}

// One round: the host's ranks send their vectors to the leader, which combines them into `acc` (already
// holding its own) in local-rank order.
void reduce_to_leader(Schedule& s, const ScheduleContext& ctx, int leader, const std::vector<int>& host,
                      const void* sendbuf, uint8_t* acc, size_t count, size_t bytes) {
  if (ctx.rank != leader) {
    gather_to_leader(s, ctx, leader, host, static_cast<const uint8_t*>(sendbuf), bytes, nullptr, 0);
    return;
  }
  s.prologue().push_back(copy_step(acc, sendbuf, bytes));
  uint8_t* parts = s.scratch(bytes * host.size());
  gather_to_leader(s, ctx, leader, host, nullptr, bytes, parts, bytes);
  for (size_t l = 0; l < host.size(); ++l)
    if (host[l] != leader) s.last().after.push_back(reduce_step(acc, acc, parts + l * bytes, count));
}

void broadcast_from_leader(Schedule& s, const ScheduleContext& ctx, int leader, const std::vector<int>& host,
                           uint8_t* buf, size_t bytes) {
  Round& round = s.round();
  if (ctx.rank == leader) {
    for (int r : host)
      if (r != leader) round.sends.push_back({r, buf, bytes});
  } else {
    round.recvs.push_back({leader, buf, bytes});
  }
}

}  // namespace bagua

#include "algorithms/block_layout.h"

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

// Allgather: our block goes into place first unless it is already there (in place).
uint8_t* allgather_prologue(Schedule& s, const CollectiveArgs& a, const BlockLayout& blocks) {
  auto* out = static_cast<uint8_t*>(a.recvbuf);
  s.prologue().push_back(copy_step(out + blocks.offset_bytes(s.context().rank), a.sendbuf, blocks.bytes(0)));
  return out;
}

}  // namespace bagua

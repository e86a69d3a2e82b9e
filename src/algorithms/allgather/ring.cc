// Allgather around the ring: n-1 steps, each forwards one block.
#include "algorithms/patterns/ring.h"
#include "algorithms/block_layout.h"
#include "algorithms/registry.h"
#include "algorithms/schedule.h"
#include "kernels/dtype.h"

namespace bagua {

namespace {

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

double cost(const CostTerms& t) { return (t.n - 1) * (t.alpha + t.m / t.n * t.beta); }

}  // namespace

extern const AlgorithmEntry kAllgatherRing;
const AlgorithmEntry kAllgatherRing{Collective::kAllgather, "ring", nullptr, cost, run_schedule<allgather_ring>};

}  // namespace bagua

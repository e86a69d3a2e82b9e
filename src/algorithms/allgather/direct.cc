// Allgather in one round: every rank sends its block to every peer.
#include "algorithms/block_layout.h"
#include "algorithms/registry.h"
#include "algorithms/schedule.h"
#include "kernels/dtype.h"

namespace bagua {

namespace {

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

double cost(const CostTerms& t) { return t.alpha + (t.n - 1) * t.delta + t.frac * t.m * 1.2 * t.beta; }

}  // namespace

extern const AlgorithmEntry kAllgatherDirect;
const AlgorithmEntry kAllgatherDirect{Collective::kAllgather, "direct", nullptr, cost, run_schedule<allgather_direct>};

}  // namespace bagua

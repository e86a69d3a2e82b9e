// Gather in one round: every rank sends its block to the root.
#include "algorithms/block_layout.h"
#include "algorithms/registry.h"
#include "algorithms/schedule.h"
#include "kernels/dtype.h"

namespace bagua {

namespace {

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

double cost(const CostTerms& t) { return t.alpha + (t.n - 1) * t.delta + t.frac * t.m * t.beta; }

}  // namespace

extern const AlgorithmEntry kGatherDirect;
const AlgorithmEntry kGatherDirect{Collective::kGather, "direct", nullptr, cost, run_schedule<gather_direct>};

}  // namespace bagua

// Scatter in one round: the root sends every rank its block.
#include "algorithms/block_layout.h"
#include "algorithms/registry.h"
#include "algorithms/schedule.h"
#include "kernels/dtype.h"

namespace bagua {

namespace {

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

double cost(const CostTerms& t) { return t.alpha + (t.n - 1) * t.delta + t.frac * t.m * t.beta; }

}  // namespace

extern const AlgorithmEntry kScatterDirect;
const AlgorithmEntry kScatterDirect{Collective::kScatter, "direct", nullptr, cost, run_schedule<scatter_direct>};

}  // namespace bagua

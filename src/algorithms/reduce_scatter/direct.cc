// Reduce-scatter in one round: every rank sends each peer its block and adds in what it receives.
#include "algorithms/block_layout.h"
#include "algorithms/registry.h"
#include "algorithms/schedule.h"
#include "kernels/dtype.h"

namespace bagua {

namespace {

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

double cost(const CostTerms& t) { return t.alpha + (t.n - 1) * t.delta + t.frac * t.m * (1.2 * t.beta + t.gamma); }

}  // namespace

extern const AlgorithmEntry kReduceScatterDirect;
const AlgorithmEntry kReduceScatterDirect{Collective::kReduceScatter, "direct", nullptr, cost,
                                          run_schedule<reduce_scatter_direct>};

}  // namespace bagua

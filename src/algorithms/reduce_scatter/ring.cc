// Reduce-scatter around the ring (block_layout.h): n-1 steps, each adds one block in.
#include "algorithms/block_layout.h"
#include "algorithms/registry.h"
#include "algorithms/schedule.h"
#include "kernels/dtype.h"

namespace bagua {

namespace {

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

double cost(const CostTerms& t) { return (t.n - 1) * (t.alpha + t.m / t.n * (t.beta + t.gamma)); }

}  // namespace

extern const AlgorithmEntry kReduceScatterRing;
const AlgorithmEntry kReduceScatterRing{Collective::kReduceScatter, "ring", nullptr, cost,
                                        run_schedule<reduce_scatter_ring>};

}  // namespace bagua

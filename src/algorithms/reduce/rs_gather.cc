// Reduce of large messages: ring reduce-scatter, then a gather of the blocks to the root.
#include "algorithms/block_layout.h"
#include "algorithms/patterns/ring.h"
#include "algorithms/registry.h"
#include "algorithms/schedule.h"
#include "kernels/dtype.h"

namespace bagua {

namespace {

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

double cost(const CostTerms& t) { return t.n * t.alpha + (t.n - 1) * t.delta + t.frac * t.m * (2 * t.beta + t.gamma); }

}  // namespace

extern const AlgorithmEntry kReduceRsGather;
const AlgorithmEntry kReduceRsGather{Collective::kReduce, "rs_gather", nullptr, cost,
                                     run_schedule<reduce_scatter_gather>};

}  // namespace bagua

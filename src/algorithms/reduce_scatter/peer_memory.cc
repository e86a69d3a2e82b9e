// Reduce-scatter within one host on the peers' buffers themselves (algorithms/peer_memory): rank r reduces block r
// of every rank's input (its own first, then the peers' by ascending rank) into its output. In place is safe: only
// rank r reads block r of any input.
#include "algorithms/peer_memory/peer_memory.h"
#include "kernels/dtype.h"

namespace bagua {

PeerPlan reduce_scatter_peer_plan(const PeerCallFacts& call) {
  PeerPlan plan;
  const size_t count = call.args.count, at = call.rank * count * datatype_size(call.args.dtype);
  if (count == 0) return plan;
  PeerReduce block{{{call.rank, PeerBufferKind::kSend, at}}, {{call.rank, PeerBufferKind::kRecv, 0}}, count};
  for (int r = 0; r < call.nranks; ++r)
    if (r != call.rank) block.sources.push_back({r, PeerBufferKind::kSend, at});
  plan.reductions.push_back(std::move(block));
  return plan;
}

namespace {

double cost(const CostTerms& t) { return peer_memory_cost(t, t.n - 1, t.m / t.n, t.frac * t.m); }

}  // namespace

extern const AlgorithmEntry kReduceScatterPeerMemory;
constinit const AlgorithmEntry kReduceScatterPeerMemory =
    peer_memory_algorithm<reduce_scatter_peer_plan>(Collective::kReduceScatter, cost);

}  // namespace bagua

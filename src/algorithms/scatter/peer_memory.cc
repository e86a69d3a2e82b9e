// Scatter within one host on the peers' buffers themselves (algorithms/peer_memory): every rank copies its block of
// the root's input into its output.
#include "algorithms/peer_memory/peer_memory.h"
#include "kernels/dtype.h"

namespace bagua {

PeerPlan scatter_peer_plan(const PeerCallFacts& call) {
  PeerPlan plan;
  const size_t bytes = call.args.count * datatype_size(call.args.dtype);
  plan.copy({call.rank, PeerBufferKind::kRecv, 0}, {call.args.root, PeerBufferKind::kSend, call.rank * bytes}, bytes);
  return plan;
}

namespace {

// What the root's memory gives out.
double cost(const CostTerms& t) { return peer_memory_cost(t, t.n - 1, t.m / t.n); }

}  // namespace

extern const AlgorithmEntry kScatterPeerMemory;
constinit const AlgorithmEntry kScatterPeerMemory =
    peer_memory_algorithm<scatter_peer_plan>(Collective::kScatter, cost);

}  // namespace bagua

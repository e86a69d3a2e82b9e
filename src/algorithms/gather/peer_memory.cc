// Gather within one host on the peers' buffers themselves (algorithms/peer_memory): every rank copies its input into
// its block of the root's output.
#include "algorithms/peer_memory/peer_memory.h"
#include "kernels/dtype.h"

namespace bagua {

PeerPlan gather_peer_plan(const PeerCallFacts& call) {
  PeerPlan plan;
  const size_t bytes = call.args.count * datatype_size(call.args.dtype);
  plan.copy({call.args.root, PeerBufferKind::kRecv, call.rank * bytes}, {call.rank, PeerBufferKind::kSend, 0}, bytes);
  return plan;
}

namespace {

// What the root's memory takes in.
double cost(const CostTerms& t) { return peer_memory_cost(t, t.n - 1, t.m / t.n); }

}  // namespace

extern const AlgorithmEntry kGatherPeerMemory;
constinit const AlgorithmEntry kGatherPeerMemory = peer_memory_algorithm<gather_peer_plan>(Collective::kGather, cost);

}  // namespace bagua

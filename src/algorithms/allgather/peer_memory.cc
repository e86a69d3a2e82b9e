// Allgather within one host on the peers' buffers themselves (algorithms/peer_memory): every rank copies each
// peer's input into its own output. In place is safe: a rank's input is its output's own block, which nobody
// writes.
#include "algorithms/peer_memory/peer_memory.h"
#include "kernels/dtype.h"

namespace bagua {

PeerPlan allgather_peer_plan(const PeerCallFacts& call) {
  PeerPlan plan;
  const size_t bytes = call.args.count * datatype_size(call.args.dtype);
  for (int r = 0; r < call.nranks; ++r)
    plan.copy({call.rank, PeerBufferKind::kRecv, r * bytes}, {r, PeerBufferKind::kSend, 0}, bytes);
  return plan;
}

namespace {

double cost(const CostTerms& t) { return peer_memory_cost(t, t.n - 1, t.m / t.n); }

}  // namespace

extern const AlgorithmEntry kAllgatherPeerMemory;
constinit const AlgorithmEntry kAllgatherPeerMemory =
    peer_memory_algorithm<allgather_peer_plan>(Collective::kAllgather, cost);

}  // namespace bagua

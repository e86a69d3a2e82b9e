// Broadcast within one host on the peers' buffers themselves (algorithms/peer_memory): every rank copies the root's
// buffer into its own.
#include "algorithms/peer_memory/peer_memory.h"
#include "kernels/dtype.h"

namespace bagua {

PeerPlan broadcast_peer_plan(const PeerCallFacts& call) {
  PeerPlan plan;
  plan.copy({call.rank, PeerBufferKind::kRecv, 0}, {call.args.root, PeerBufferKind::kSend, 0},
            call.args.count * datatype_size(call.args.dtype));
  return plan;
}

namespace {

double cost(const CostTerms& t) { return peer_memory_cost(t, 1, t.m); }

}  // namespace

extern const AlgorithmEntry kBroadcastPeerMemory;
constinit const AlgorithmEntry kBroadcastPeerMemory =
    peer_memory_algorithm<broadcast_peer_plan>(Collective::kBroadcast, cost);

}  // namespace bagua

// Gather within one host on the peers' buffers themselves (algorithms/peer_memory): every rank copies its input into
// its block of the root's output.
#include "algorithms/peer_memory/peer_memory.h"
#include "algorithms/registry.h"
#include "kernels/dtype.h"

namespace bagua {

namespace {

PeerPlan gather_plan(const PeerCallFacts& call) {
  PeerPlan plan;
  const size_t bytes = call.args.count * datatype_size(call.args.dtype);
  plan.copy({call.args.root, PeerBufferKind::kRecv, call.rank * bytes}, {call.rank, PeerBufferKind::kSend, 0}, bytes);
  return plan;
}

// What the root's memory takes in.
double cost(const CostTerms& t) { return peer_memory_cost(t, t.n - 1, t.m / t.n); }

}  // namespace

extern const AlgorithmEntry kGatherPeerMemory;
const AlgorithmEntry kGatherPeerMemory{Collective::kGather,
                                       "peer_memory",
                                       peer_memory_supports,
                                       cost,
                                       run_peer_memory<gather_plan>,
                                       true,
                                       false,
                                       run_peer_memory_on_device<gather_plan>};

}  // namespace bagua

// Alltoall(v) within one host on the peers' buffers themselves (algorithms/peer_memory): every rank copies each
// peer's block for it (where that peer's call puts it) into its own output.
#include "algorithms/peer_memory/peer_memory.h"
#include "algorithms/alltoall/layout.h"

namespace bagua {

PeerPlan alltoall_peer_plan(const PeerCallFacts& call) {
  PeerPlan plan;
  const AlltoallLayout layout = alltoall_layout(call.args, call.nranks);
  for (int r = 0; r < call.nranks; ++r)
    plan.copy({call.rank, PeerBufferKind::kRecv, layout.recv_off(r)}, {r, PeerBufferKind::kSend, call.offset_for_me[r]},
              call.bytes_for_me[r]);
  return plan;
}

namespace {

// Every byte is one single-copy read, as in the direct alltoall's rendezvous: none of the direct allreduce's saving
// over the ring (direct_move_factor) applies.
double cost(const CostTerms& t) {
  const double read_bytes = (t.n - 1) * (t.m / t.n);
  return peer_memory_cost(t, t.n - 1, t.m / t.n) + read_bytes * t.beta * (1.0 - t.model.direct_move_factor);
}

}  // namespace

extern const AlgorithmEntry kAlltoallPeerMemory;
constinit const AlgorithmEntry kAlltoallPeerMemory =
    peer_memory_algorithm<alltoall_peer_plan>(Collective::kAlltoall, cost);

// Chosen as for an empty message like every alltoallv algorithm (its counts differ per rank): after shared memory.
extern const AlgorithmEntry kAlltoallvPeerMemory;
constinit const AlgorithmEntry kAlltoallvPeerMemory =
    peer_memory_algorithm<alltoall_peer_plan>(Collective::kAlltoallv, cost);

}  // namespace bagua

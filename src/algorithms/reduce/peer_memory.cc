// Reduce within one host on the peers' buffers themselves (algorithms/peer_memory): rank b reduces block b of every
// rank's input (the root's first, then the others' by ascending rank) and writes it into the root's output, so
// every rank shares the work. In place is safe: only rank b reads or writes block b, and it reads the root's input
// (in place, the output itself) before it writes the output.
#include "algorithms/peer_memory/peer_memory.h"
#include "algorithms/patterns/ring.h"
#include "kernels/dtype.h"

namespace bagua {

PeerPlan reduce_peer_plan(const PeerCallFacts& call) {
  PeerPlan plan;
  const size_t count = ring::chunk_size(call.args.count, call.nranks, call.rank);
  if (count == 0) return plan;
  const size_t at = ring::chunk_begin(call.args.count, call.nranks, call.rank) * datatype_size(call.args.dtype);
  const int root = call.args.root;
  PeerReduce block{{{root, PeerBufferKind::kSend, at}}, {{root, PeerBufferKind::kRecv, at}}, count};
  for (int r = 0; r < call.nranks; ++r)
    if (r != root) block.sources.push_back({r, PeerBufferKind::kSend, at});
  plan.reductions.push_back(std::move(block));
  return plan;
}

namespace {

double cost(const CostTerms& t) { return peer_memory_cost(t, t.n, t.m / t.n, t.frac * t.m); }

}  // namespace

extern const AlgorithmEntry kReducePeerMemory;
constinit const AlgorithmEntry kReducePeerMemory = peer_memory_algorithm<reduce_peer_plan>(Collective::kReduce, cost);

}  // namespace bagua

// Direct allreduce between the ranks of one host, on the peers' buffers themselves (algorithms/peer_memory: cross-
// memory attach on host memory, CUDA IPC on device memory).
//
// Rank b owns block b: it reduces block b of every rank's input (its own first, then the peers' by ascending rank)
// into its own output, segment by segment, and writes the result straight into every peer's output. Per rank,
// (n-1)/n of the vector N is read from peers and as much written into them; the ring with single-copy reads moves
// twice that, because each rank reads its result back from the owner. In place is safe: only the owner of block b
// reads block b of any input, and it reads a segment before it writes it.
#include "algorithms/patterns/ring.h"
#include "algorithms/peer_memory/peer_memory.h"
#include "algorithms/registry.h"
#include "kernels/dtype.h"

namespace bagua {

PeerPlan allreduce_peer_plan(const PeerCallFacts& call) {
  PeerPlan plan;
  const size_t elem = datatype_size(call.args.dtype);
  const size_t count = ring::chunk_size(call.args.count, call.nranks, call.rank);
  if (count == 0) return plan;
  const size_t at = ring::chunk_begin(call.args.count, call.nranks, call.rank) * elem;
  PeerReduce block{{{call.rank, PeerBufferKind::kSend, at}}, {{call.rank, PeerBufferKind::kRecv, at}}, count};
  for (int r = 0; r < call.nranks; ++r) {
    if (r == call.rank) continue;
    block.sources.push_back({r, PeerBufferKind::kSend, at});
    block.destinations.push_back({r, PeerBufferKind::kRecv, at});
  }
  plan.reductions.push_back(std::move(block));
  return plan;
}

namespace {

// Its block read from every peer and written into every peer. Calibrated on its own (docs/algorithms.md: faster than
// the ring from 64 KiB on 2 ranks), without the setup term of the other peer_memory algorithms.
double cost(const CostTerms& t) { return peer_memory_cost(t, 2 * (t.n - 1), t.m / t.n, t.frac * t.m, 0.0); }

}  // namespace

// One host only, and only when every rank could attach to its peers' memory at init (also on device memory, where
// a call may fall back to staging).
extern const AlgorithmEntry kAllreduceDirect;
const AlgorithmEntry kAllreduceDirect{Collective::kAllreduce,
                                      "direct",
                                      peer_memory_supports,
                                      cost,
                                      run_peer_memory<allreduce_peer_plan>,
                                      true,
                                      false,
                                      run_peer_memory_on_device<allreduce_peer_plan>};

}  // namespace bagua

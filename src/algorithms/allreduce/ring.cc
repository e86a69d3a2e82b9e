// Pipelined ring allreduce (ring_operation.h): reduce-scatter then allgather around the ring in segments.
#include "algorithms/allreduce/ring_operation.h"
#include "algorithms/registry.h"

namespace bagua {

namespace {

std::unique_ptr<Operation> build(const CollectiveArgs& a, const ScheduleContext& ctx, std::string description) {
  RingAllreduceArgs ring{a.sendbuf,
                         a.recvbuf,
                         a.count,
                         a.dtype,
                         a.op,
                         ctx.rank,
                         ctx.nranks,
                         ctx.fingerprint,
                         ctx.unmatched_bits,
                         ctx.sequence,
                         ctx.ring_segment_bytes,
                         ctx.ring_window,
                         ctx.ring_position(),
                         ctx.ring_next(),
                         ctx.ring_prev()};
  return std::make_unique<RingAllreduce>(ring, std::move(description));
}

// 2(n-1) steps of one chunk each, pipelined in segments of at most 512 KiB.
double cost(const CostTerms& t) {
  return 2 * (t.n - 1) * t.round(std::min(t.m / t.n, 512.0 * 1024)) + 2 * t.frac * t.m * t.beta +
         t.frac * t.m * t.gamma;
}

}  // namespace

extern const AlgorithmEntry kAllreduceRing;
const AlgorithmEntry kAllreduceRing{Collective::kAllreduce, "ring", nullptr, cost, build};

}  // namespace bagua

// Allgather by recursive doubling: log2(n) rounds, the exchanged region doubling each time (n a power of two).
#include "algorithms/block_layout.h"
#include "algorithms/patterns/recursive.h"
#include "algorithms/registry.h"
#include "algorithms/schedule.h"
#include "kernels/dtype.h"

namespace bagua {

namespace {

std::unique_ptr<Schedule> allgather_recursive_doubling(const CollectiveArgs& a, const ScheduleContext& ctx) {
  auto s = std::make_unique<Schedule>(ctx);
  const int n = ctx.nranks, r = ctx.rank;  // n is a power of two (algorithm_supports)
  BlockLayout blocks = BlockLayout::uniform(a.count, n, a.dtype);
  uint8_t* out = allgather_prologue(*s, a, blocks);
  int lo = r, width = 1;
  for (int distance = 1; distance < n; distance *= 2) {
    int partner = r ^ distance;
    int other_lo = (r & distance) == 0 ? lo + width : lo - width;
    Round& round = s->round();
    round.recvs.push_back({partner, out + blocks.offset_bytes(other_lo), blocks.bytes(0) * width});
    round.sends.push_back({partner, out + blocks.offset_bytes(lo), blocks.bytes(0) * width});
    lo = std::min(lo, other_lo);
    width *= 2;
  }
  return s;
}

double cost(const CostTerms& t) { return t.levels * t.alpha + t.frac * t.m * t.beta; }

}  // namespace

extern const AlgorithmEntry kAllgatherRd;
const AlgorithmEntry kAllgatherRd{
    Collective::kAllgather, "rd",
    [](int nranks, const HostLayout&) { return nranks > 0 && (nranks & (nranks - 1)) == 0; }, cost,
    run_schedule<allgather_recursive_doubling>};

}  // namespace bagua

// Dissemination barrier: ceil(log2 n) rounds of empty messages.
#include "algorithms/patterns/binomial.h"
#include "algorithms/patterns/ring.h"
#include "algorithms/registry.h"
#include "algorithms/schedule.h"
#include "kernels/dtype.h"

namespace bagua {

namespace {

// Dissemination barrier: round k signals rank + 2^k and waits for rank - 2^k.
std::unique_ptr<Schedule> barrier_dissemination(const CollectiveArgs&, const ScheduleContext& ctx) {
  auto s = std::make_unique<Schedule>(ctx);
  static uint8_t token;
  const int n = ctx.nranks;
  for (int distance = 1; distance < n; distance *= 2) {
    Round& round = s->round();
    round.recvs.push_back({ring::wrap(ctx.rank - distance, n), &token, 0});
    round.sends.push_back({ring::wrap(ctx.rank + distance, n), &token, 0});
  }
  return s;
}

double cost(const CostTerms& t) { return t.levels * t.alpha; }

}  // namespace

extern const AlgorithmEntry kBarrierDissemination;
const AlgorithmEntry kBarrierDissemination{Collective::kBarrier, "dissemination", nullptr, cost,
                                           run_schedule<barrier_dissemination>};

}  // namespace bagua

// Allreduce by recursive doubling: log2(p) rounds that each exchange and combine the whole vector; any nranks
// (folding.h).
#include "algorithms/allreduce/folding.h"
#include "algorithms/patterns/recursive.h"
#include "algorithms/registry.h"
#include "algorithms/schedule.h"
#include "kernels/dtype.h"

namespace bagua {

namespace {

std::unique_ptr<Schedule> allreduce_recursive_doubling(const CollectiveArgs& a, const ScheduleContext& ctx) {
  auto s = std::make_unique<Schedule>(ctx);
  size_t bytes = a.count * datatype_size(a.dtype);
  uint8_t* buf = prepare_buffer(*s, a, bytes);
  if (ctx.nranks == 1) return s;
  uint8_t* tmp = s->scratch(bytes);
  Folding f = folding_of(ctx);
  fold_in(*s, f, buf, tmp, a.count, bytes);
  for (int distance = 1; distance < f.core_size; distance *= 2) {
    Round& round = s->round();
    if (f.core < 0) continue;
    int partner = recursive::real_rank(f.core ^ distance, ctx.nranks);
    round.recvs.push_back({partner, tmp, bytes});
    round.sends.push_back({partner, buf, bytes});
    combine_with_partner(round, ctx.rank, partner, buf, tmp, a.count);
  }
  fold_out(*s, f, buf, bytes);
  if (a.op == BAGUA_AVG) s->last().after.push_back(divide_step(buf, a.count));
  return s;
}

double cost(const CostTerms& t) { return t.lp * (t.round(t.m) + t.m * t.beta + t.m * t.gamma) + t.fold_cost; }

}  // namespace

extern const AlgorithmEntry kAllreduceRd;
const AlgorithmEntry kAllreduceRd{Collective::kAllreduce, "rd", nullptr, cost,
                                  run_schedule<allreduce_recursive_doubling>};

}  // namespace bagua

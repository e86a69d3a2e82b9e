// Rabenseifner's allreduce: recursive halving reduce-scatter, then recursive doubling allgather; any nranks
// (folding.h).
#include "algorithms/allreduce/folding.h"
#include "algorithms/patterns/recursive.h"
#include "algorithms/patterns/ring.h"
#include "algorithms/registry.h"
#include "algorithms/schedule.h"
#include "kernels/dtype.h"

namespace bagua {

namespace {

std::unique_ptr<Schedule> allreduce_rabenseifner(const CollectiveArgs& a, const ScheduleContext& ctx) {
  auto s = std::make_unique<Schedule>(ctx);
  size_t es = datatype_size(a.dtype);
  size_t bytes = a.count * es;
  uint8_t* buf = prepare_buffer(*s, a, bytes);
  if (ctx.nranks == 1) return s;
  uint8_t* tmp = s->scratch(bytes);
  Folding f = folding_of(ctx);
  const int p = f.core_size;
  auto begin = [&](int block) { return ring::chunk_begin(a.count, p, block); };  // element offset of a block

  fold_in(*s, f, buf, tmp, a.count, bytes);
  // Recursive halving: keep half of the current block range, send the other half to the partner.
  int lo = 0, hi = p;
  for (int distance = p / 2; distance >= 1; distance /= 2) {
    Round& round = s->round();
    if (f.core < 0) continue;
    int partner = recursive::real_rank(f.core ^ distance, ctx.nranks);
    int mid = lo + (hi - lo) / 2;
    bool keep_low = (f.core & distance) == 0;
    int keep_lo = keep_low ? lo : mid, keep_hi = keep_low ? mid : hi;
    int give_lo = keep_low ? mid : lo, give_hi = keep_low ? hi : mid;
    size_t keep_off = begin(keep_lo), keep_count = begin(keep_hi) - keep_off;
    size_t give_off = begin(give_lo), give_count = begin(give_hi) - give_off;
    round.recvs.push_back({partner, tmp + keep_off * es, keep_count * es});
    round.sends.push_back({partner, buf + give_off * es, give_count * es});
    combine_with_partner(round, ctx.rank, partner, buf + keep_off * es, tmp + keep_off * es, keep_count);
    lo = keep_lo;
    hi = keep_hi;
  }
  // This core rank now owns block `core` in full.
  if (a.op == BAGUA_AVG && f.core >= 0) {
    size_t off = begin(f.core);
    s->then(divide_step(buf + off * es, begin(f.core + 1) - off));
  }
  // Recursive doubling allgather of the owned blocks.
  for (int distance = 1; distance < p; distance *= 2) {
    Round& round = s->round();
    if (f.core < 0) continue;
    int partner = recursive::real_rank(f.core ^ distance, ctx.nranks);
    int width = hi - lo;
    int other_lo = (f.core & distance) == 0 ? hi : lo - width;
    size_t mine_off = begin(lo), mine_count = begin(hi) - mine_off;
    size_t other_off = begin(other_lo), other_count = begin(other_lo + width) - other_off;
    round.recvs.push_back({partner, buf + other_off * es, other_count * es});
    round.sends.push_back({partner, buf + mine_off * es, mine_count * es});
    lo = std::min(lo, other_lo);
    hi = lo + 2 * width;
  }
  fold_out(*s, f, buf, bytes);
  return s;
}

double cost(const CostTerms& t) {
  return 2 * t.lp * t.round(t.m / 2) + 2 * (t.p - 1.0) / t.p * t.m * t.beta + (t.p - 1.0) / t.p * t.m * t.gamma +
         t.fold_cost;
}

}  // namespace

extern const AlgorithmEntry kAllreduceRabenseifner;
const AlgorithmEntry kAllreduceRabenseifner{Collective::kAllreduce, "rabenseifner", nullptr, cost,
                                            run_schedule<allreduce_rabenseifner>};

}  // namespace bagua

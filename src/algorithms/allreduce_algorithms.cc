// Latency-oriented allreduce schedules for any nranks: recursive doubling, and Rabenseifner's recursive
// halving reduce-scatter + recursive doubling allgather. Non-power-of-two counts fold the first 2*rem
// ranks in pairs (patterns/recursive.h). Partners always combine as (lower rank's data) op (higher rank's
// data), so both compute the same bits and every rank ends identical.
#include <cstring>

#include "algorithms/collectives.h"
#include "algorithms/patterns/recursive.h"
#include "algorithms/patterns/ring.h"
#include "kernels/dtype.h"

namespace bagua {

namespace {

struct Folding {
  int rem;
  int core;       // this rank's core number, or -1
  int core_size;  // p
};

Folding folding_of(const ScheduleContext& ctx) {
  return {recursive::folded(ctx.nranks), recursive::core_rank(ctx.rank, ctx.nranks), recursive::core_size(ctx.nranks)};
}

// Round 0 when rem > 0: odd ranks below 2*rem hand their vector to the even rank before them.
void fold_in(Schedule& s, const Folding& f, uint8_t* buf, uint8_t* tmp, size_t count, size_t bytes) {
  if (f.rem == 0) return;
  const ScheduleContext& ctx = s.context();
  Round& round = s.round();
  if (ctx.rank >= 2 * f.rem) return;
  if (ctx.rank % 2 == 1) {
    round.sends.push_back({ctx.rank - 1, buf, bytes});
  } else {
    round.recvs.push_back({ctx.rank + 1, tmp, bytes});
    round.after.push_back(reduce_step(buf, buf, tmp, count));
  }
}

// Last round when rem > 0: the even ranks give the odd ones the result.
void fold_out(Schedule& s, const Folding& f, uint8_t* buf, size_t bytes) {
  if (f.rem == 0) return;
  const ScheduleContext& ctx = s.context();
  Round& round = s.round();
  if (ctx.rank >= 2 * f.rem) return;
  if (ctx.rank % 2 == 1)
    round.recvs.push_back({ctx.rank - 1, buf, bytes});
  else
    round.sends.push_back({ctx.rank + 1, buf, bytes});
}

void combine_with_partner(Round& round, int my_rank, int partner, uint8_t* mine, const uint8_t* theirs, size_t count) {
  if (partner < my_rank)
    round.after.push_back(reduce_step(mine, theirs, mine, count));
  else
    round.after.push_back(reduce_step(mine, mine, theirs, count));
}

uint8_t* prepare_buffer(Schedule& s, const CollectiveArgs& a, size_t bytes) {
  auto* buf = static_cast<uint8_t*>(a.recvbuf);
  if (a.sendbuf != a.recvbuf) s.prologue().push_back(copy_step(buf, a.sendbuf, bytes));
  return buf;
}

}  // namespace

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

}  // namespace bagua

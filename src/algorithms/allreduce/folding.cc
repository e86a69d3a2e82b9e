#include "algorithms/allreduce/folding.h"

#include "algorithms/patterns/recursive.h"

namespace bagua {

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

}  // namespace bagua

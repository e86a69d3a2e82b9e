// Shared by the recursive allreduces (rd, rabenseifner): non-power-of-two counts fold the first 2*rem ranks in
// pairs (patterns/recursive.h). Partners always combine as (lower rank's data) op (higher rank's data), so
// both compute the same bits and every rank ends identical.
#pragma once

#include "algorithms/collective_args.h"
#include "algorithms/schedule.h"

namespace bagua {

struct Folding {
  int rem;
  int core;       // this rank's core number, or -1
  int core_size;  // p
};

Folding folding_of(const ScheduleContext& ctx);
void fold_in(Schedule& s, const Folding& f, uint8_t* buf, uint8_t* tmp, size_t count, size_t bytes);
void fold_out(Schedule& s, const Folding& f, uint8_t* buf, size_t bytes);
void combine_with_partner(Round& round, int my_rank, int partner, uint8_t* mine, const uint8_t* theirs, size_t count);
uint8_t* prepare_buffer(Schedule& s, const CollectiveArgs& a, size_t bytes);

}  // namespace bagua

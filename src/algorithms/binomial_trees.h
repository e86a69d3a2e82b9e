// Binomial-tree schedules that other algorithms compose: the tree allreduce is a reduce to rank 0 followed by a
// broadcast from it. Defined in reduce/tree.cc and broadcast/tree.cc.
#pragma once

#include <memory>

#include "algorithms/collective_args.h"
#include "algorithms/schedule.h"

namespace bagua {

std::unique_ptr<Schedule> reduce_tree(const CollectiveArgs& a, const ScheduleContext& ctx);
std::unique_ptr<Schedule> broadcast_tree(const CollectiveArgs& a, const ScheduleContext& ctx);

}  // namespace bagua

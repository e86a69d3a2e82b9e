// Constants of the cost model that differ too much between machines to be fixed offline: measured when a
// communicator is made and agreed by all its ranks, so that selection stays the same on every rank.
#pragma once

#include "core/comm.h"

namespace bagua {

// Alltoall through shared segments (two copies) against single-copy reads, on a one-host communicator that has
// segments: the ratio of their times, the slowest rank's of each (CostModel::shared_copy_factor). Runs a few
// alltoalls and one allreduce on every rank (collective), which the caller never sees (Comm::begin_setup_operations).
// Returns 0 where there is nothing to measure.
double measure_shared_copy_factor(Comm& comm);

}  // namespace bagua

// Constants of the cost model that differ too much between machines to be fixed offline: measured when a
// communicator is made and agreed by all its ranks, so that selection stays the same on every rank.
#pragma once

#include <vector>

#include "algorithms/cost_model.h"
#include "core/comm.h"

namespace bagua {

// An alltoall through shared segments (two copies) and one by single-copy reads, at one block size: for each,
// the slowest rank's fastest mean of two calls in a row, the same on every rank. Their ratio is a candidate for
// CostModel::shared_copy_factor at that block size.
struct SharedCopyTimes {
  size_t block_bytes = 0;
  double shm_us = 0;
  double single_copy_us = 0;
  bool measured() const { return shm_us > 0 && single_copy_us > 0; }
  double factor() const { return shm_us / single_copy_us; }
};
// Measured on a one-host communicator that has segments (else nothing is measured). Runs a few alltoalls and one
// allreduce on every rank (collective), which the caller never sees (Comm::begin_setup_operations). Where the
// ranks have cores of their own, at a small and a large block size (the two copies' cost against a single-copy
// read changes with size); where they share cores, at one size between.
std::vector<SharedCopyTimes> time_alltoall_copies(Comm& comm);

// Whether a measured factor replaces the cost model's offline one. Only a verdict for single-copy reads does (shm
// taking 1.1-4x their time): below, shm was at least as fast, and the offline 0.5 chooses it as the measurement
// would; above 4 a core probably stalled. Where ranks share cores the model then keeps shm for small alltoalls
// (CostModel::shared_cores_round_us), so a factor near 1.1 moves the switch to direct to larger sizes instead of
// to every size.
bool measured_factor_decides(double factor);

// The model's curve from what init measured: each point's factor where it decides, else the offline one.
CostModel::SharedCopyFactor shared_copy_curve(const std::vector<SharedCopyTimes>& points);

}  // namespace bagua

// One gossip step (bagua_neighbor_allreduce): every rank posts its receives from its in-neighbours, then
// sends to its out-neighbours (so no graph can deadlock), then sums self first and in-neighbours by
// ascending rank, in fp32 for fp32 and fp64 for fp64. Hierarchical: host average to the leader, gossip
// between leaders over the host graph, result back to the host's ranks.
#pragma once

#include <memory>

#include "algorithms/gossip/topology.h"
#include "algorithms/schedule.h"
#include "core/comm.h"
#include "core/operation.h"

namespace bagua {

struct NeighborArgs {
  const void* sendbuf;
  void* recvbuf;
  size_t count;
  bagua_datatype_t dtype;  // FLOAT32 or FLOAT64
  uint64_t step;
};

// The fingerprint details of a neighbour allreduce (dispatch.h's make_context): count, topology and step.
CallDetails neighbor_details(const Topology& topology, size_t count, uint64_t step);

// taken: a context whose sequence number the caller took already (the device path), else one is taken here.
std::unique_ptr<Operation> build_neighbor_allreduce(Comm& comm, const Topology& topology, const NeighborArgs& args,
                                                    const ScheduleContext* taken = nullptr);

}  // namespace bagua

// extern "C" entry points of gossip averaging (topologies, neighbor allreduce), low-precision decentralized
// SGD and asynchronous model averaging.
#include <memory>

#include "algorithms/async/async_average.h"
#include "algorithms/dispatch.h"
#include "algorithms/gossip/lpdec.h"
#include "algorithms/gossip/neighbor_allreduce.h"
#include "algorithms/gossip/topology.h"
#include "api/api_guard.h"
#include "api/op_helpers.h"
#include "kernels/device_runtime.h"
#include "kernels/dtype.h"
#include "kernels/memory_type.h"

struct bagua_topology {
  bagua_comm* comm = nullptr;
  int kind = -1;  // bagua_topology_kind_t, -1 for a user graph
  bagua::Topology impl;
};

struct bagua_lpdec {
  bagua_comm* comm = nullptr;
  std::unique_ptr<bagua::LowPrecisionDecentralized> impl;
};

struct bagua_async_average {
  std::unique_ptr<bagua::AsyncAverager> impl;
};

namespace bagua {
namespace {

void check_gossip_dtype(bagua_datatype_t dtype) { check_dtype_in(dtype, {BAGUA_FLOAT32, BAGUA_FLOAT64}, "averaging"); }

// The device a buffer lives on, or -1 for host memory (NULL with bytes refused).
int device_of(const void* buf, size_t bytes, const char* name) {
  CallMemory memory;
  memory.add(buf, bytes, name);
  return memory.on_device() ? memory.device() : -1;
}

std::unique_ptr<Operation> make_neighbor(bagua_comm* handle, const void* sendbuf, void* recvbuf, size_t count,
                                         bagua_datatype_t dtype, bagua_topology* topo, uint64_t step, void* stream) {
  Comm& comm = require_comm(handle);
  require_pointer(topo, "topo");
  if (topo->comm != handle) fail(BAGUA_ERR_INVALID_ARGUMENT, "topo was created for another communicator");
  check_gossip_dtype(dtype);
  RelaxationBuffers buffers = check_relaxation_buffers(comm, sendbuf, recvbuf, count, dtype);
  comm.check_usable();
  if (buffers.on_device)  // (the topology is copied: the call may run after the caller changes or frees it)
    return make_device_relaxation(
        comm, BAGUA_OPKIND_NEIGHBOR_ALLREDUCE, buffers, stream, TagKind::kNeighbor, dtype, BAGUA_SUM,
        neighbor_details(topo->impl, count, step), "neighbor_allreduce",
        [&comm, topology = topo->impl, count, dtype, step](const void* send, void* recv, const ScheduleContext& ctx) {
          return build_neighbor_allreduce(comm, topology, NeighborArgs{send, recv, count, dtype, step}, &ctx);
        });
  return build_neighbor_allreduce(comm, topo->impl, NeighborArgs{sendbuf, recvbuf, count, dtype, step});
}

}  // namespace
}  // namespace bagua

using namespace bagua;

extern "C" {

bagua_status_t bagua_topology_create(bagua_comm_t comm, bagua_topology_kind_t kind, bagua_topology_t* topo) {
  return guarded(comm, "bagua_topology_create", [&] {
    Comm& c = require_comm(comm);
    require_pointer(topo, "topo");
    auto made = std::make_unique<bagua_topology>();
    made->comm = comm;
    made->kind = kind;
    made->impl = Topology::builtin(c.size(), kind);
    *topo = made.release();
  });
}

bagua_status_t bagua_topology_create_from_edges(bagua_comm_t comm, int nedges, const int* src, const int* dst,
                                                const double* weights, int metropolis_hastings,
                                                bagua_topology_t* topo) {
  return guarded(comm, "bagua_topology_create_from_edges", [&] {
    Comm& c = require_comm(comm);
    require_pointer(topo, "topo");
    if (metropolis_hastings != 0 && metropolis_hastings != 1)
      fail(BAGUA_ERR_INVALID_ARGUMENT, "metropolis_hastings must be 0 or 1");
    auto made = std::make_unique<bagua_topology>();
    made->comm = comm;
    made->impl = Topology::from_edges(c.size(), nedges, src, dst, weights, metropolis_hastings == 1);
    *topo = made.release();
  });
}

bagua_status_t bagua_topology_set_hierarchical(bagua_topology_t topo, int hierarchical) {
  return guarded(nullptr, "bagua_topology_set_hierarchical", [&] {
    require_pointer(topo, "topo");
    if (hierarchical != 0 && hierarchical != 1) fail(BAGUA_ERR_INVALID_ARGUMENT, "hierarchical must be 0 or 1");
    if (topo->kind < 0) fail(BAGUA_ERR_INVALID_USAGE, "a user graph names ranks, not hosts: it cannot be hierarchical");
    Comm& c = require_comm(topo->comm);
    int nodes = hierarchical ? c.nhosts() : c.size();
    if (hierarchical)
      for (const auto& host : c.hosts())
        if (host.size() != c.hosts().front().size())
          fail(BAGUA_ERR_INVALID_USAGE, "hierarchical gossip needs the same number of ranks on every host");
    if (hierarchical && topo->kind == BAGUA_TOPO_SHIFT_ONE && nodes % 2 != 0)
      fail(BAGUA_ERR_INVALID_ARGUMENT,
           "BAGUA_TOPO_SHIFT_ONE pairs the hosts when hierarchical: it needs an even number of hosts, not {}", nodes);
    Topology t = Topology::builtin(nodes, static_cast<bagua_topology_kind_t>(topo->kind));
    t.hierarchical = hierarchical == 1;
    topo->impl = t;
  });
}

bagua_status_t bagua_topology_check(bagua_topology_t topo) {
  bagua_comm* handle = topo ? topo->comm : nullptr;
  return guarded(handle, "bagua_topology_check", [&] {
    require_pointer(topo, "topo");
    Comm& c = require_comm(topo->comm);
    uint64_t digest = topo->impl.digest(), lo = digest, hi = digest;
    allreduce_now(c, &lo, &lo, 1, BAGUA_UINT64, BAGUA_MIN);
    allreduce_now(c, &hi, &hi, 1, BAGUA_UINT64, BAGUA_MAX);
    if (lo != hi)
      fail(BAGUA_ERR_INVALID_USAGE,
           "ranks hold different topologies (digests {:#x} to {:#x}; this rank {:#x}): "
           "their sends and receives would not match",
           lo, hi, digest);
  });
}

bagua_status_t bagua_topology_destroy(bagua_topology_t topo) {
  return guarded(nullptr, "bagua_topology_destroy", [&] {
    require_pointer(topo, "topo");
    delete topo;
  });
}

bagua_status_t bagua_neighbor_allreduce(const void* sendbuf, void* recvbuf, size_t count, bagua_datatype_t dtype,
                                        bagua_topology_t topo, uint64_t step, bagua_comm_t comm, void* stream) {
  return guarded(comm, "bagua_neighbor_allreduce",
                 [&] { run_blocking(comm, make_neighbor(comm, sendbuf, recvbuf, count, dtype, topo, step, stream)); });
}

bagua_status_t bagua_ineighbor_allreduce(const void* sendbuf, void* recvbuf, size_t count, bagua_datatype_t dtype,
                                         bagua_topology_t topo, uint64_t step, bagua_comm_t comm,
                                         bagua_request_t* req) {
  return guarded(comm, "bagua_ineighbor_allreduce", [&] {
    require_comm(comm);
    require_pointer(req, "req");
    post_request(comm, make_neighbor(comm, sendbuf, recvbuf, count, dtype, topo, step, nullptr), req);
  });
}

bagua_status_t bagua_lpdec_create(bagua_comm_t comm, size_t count, const bagua_compression_t* cfg, const float* initial,
                                  bagua_lpdec_t* lpdec) {
  return guarded(comm, "bagua_lpdec_create", [&] {
    Comm& c = require_comm(comm);
    require_pointer(lpdec, "lpdec");
    Codec codec = Codec::from_config(cfg);
    const size_t bytes = checked_bytes(count, BAGUA_FLOAT32, "count");
    const int device = device_of(initial, bytes, "initial");  // the replicas live where initial does
    c.check_usable();
    if (device >= 0)  // earlier work on initial: the legacy default stream of its device
      device_runtime().on_device(device, [&] { device_runtime().synchronize(nullptr, c.config().timeout_ms); });
    auto made = std::make_unique<bagua_lpdec>();
    made->comm = comm;
    made->impl = std::make_unique<LowPrecisionDecentralized>(c, count, codec, initial, device);
    *lpdec = made.release();
  });
}

bagua_status_t bagua_lpdec_step(bagua_lpdec_t lpdec, float* x) {
  bagua_comm* handle = lpdec ? lpdec->comm : nullptr;
  return guarded(handle, "bagua_lpdec_step", [&] {
    require_pointer(lpdec, "lpdec");
    const size_t bytes = lpdec->impl->count() * sizeof(float);
    Comm& c = require_comm(lpdec->comm);
    device_of(x, bytes, "x");  // (checks x)
    c.check_usable();
    lpdec->impl->step(x);
  });
}

bagua_status_t bagua_lpdec_replica(bagua_lpdec_t lpdec, int which, float* out, size_t count) {
  return guarded(nullptr, "bagua_lpdec_replica", [&] {
    require_pointer(lpdec, "lpdec");
    require_pointer(out, "out");
    if (which < -1 || which > 1) fail(BAGUA_ERR_INVALID_ARGUMENT, "which {} is not -1, 0 or +1", which);
    if (count != lpdec->impl->count())
      fail(BAGUA_ERR_INVALID_ARGUMENT, "count {} differs from the lpdec's {}", count, lpdec->impl->count());
    device_of(out, count * sizeof(float), "out");  // (checks out)
    lpdec->impl->copy_replica(which, out);
  });
}

bagua_status_t bagua_lpdec_destroy(bagua_lpdec_t lpdec) {
  return guarded(nullptr, "bagua_lpdec_destroy", [&] {
    require_pointer(lpdec, "lpdec");
    delete lpdec;
  });
}

bagua_status_t bagua_async_average_start(bagua_comm_t comm, void* buf, size_t count, bagua_datatype_t dtype,
                                         int interval_ms, bagua_async_average_t* handle) {
  return guarded(comm, "bagua_async_average_start", [&] {
    Comm& c = require_comm(comm);
    require_pointer(handle, "handle");
    check_gossip_dtype(dtype);
    const int device = device_of(buf, checked_bytes(count, dtype, "count"), "buf");
    if (interval_ms < 0) fail(BAGUA_ERR_INVALID_ARGUMENT, "interval_ms {} is negative", interval_ms);
    // A round waits for the peers' threads, which sleep up to interval_ms between rounds (also after a stop).
    if (interval_ms >= c.config().timeout_ms)
      fail(BAGUA_ERR_INVALID_ARGUMENT,
           "interval_ms {} is not below BAGUA_TIMEOUT ({} ms): the peers' rounds would time out waiting", interval_ms,
           c.config().timeout_ms);
    std::unique_ptr<Comm> own = c.split(0, c.rank());  // collective on comm
    c.link_for_abort(*own);                            // bagua_comm_abort(comm) reaches the averager too
    auto made = std::make_unique<bagua_async_average>();
    made->impl = std::make_unique<AsyncAverager>(std::move(own), buf, count, dtype, interval_ms, device);
    *handle = made.release();
  });
}

bagua_status_t bagua_async_average_lock(bagua_async_average_t handle) {
  return guarded(nullptr, "bagua_async_average_lock", [&] {
    require_pointer(handle, "handle");
    handle->impl->lock();
  });
}

bagua_status_t bagua_async_average_unlock(bagua_async_average_t handle) {
  return guarded(nullptr, "bagua_async_average_unlock", [&] {
    require_pointer(handle, "handle");
    handle->impl->unlock();
  });
}

bagua_status_t bagua_async_average_stats(bagua_async_average_t handle, uint64_t* rounds) {
  return guarded(nullptr, "bagua_async_average_stats", [&] {
    require_pointer(handle, "handle");
    require_pointer(rounds, "rounds");
    *rounds = handle->impl->rounds();
  });
}

bagua_status_t bagua_async_average_stop(bagua_async_average_t handle) {
  // Not the parent communicator: it may be destroyed already (the averager runs on a communicator of its own).
  return guarded(nullptr, "bagua_async_average_stop", [&]() -> bagua_status_t {
    require_pointer(handle, "handle");
    std::string message;
    bagua_status_t status = handle->impl->stop(&message);  // refused (handle kept) while the caller holds the lock
    delete handle;
    if (status != BAGUA_SUCCESS) fail(status, "the averaging thread failed: {}", message);
    return BAGUA_SUCCESS;
  });
}

}  // extern "C"

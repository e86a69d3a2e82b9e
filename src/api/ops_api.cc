// extern "C" entry points for operations: the dispatcher (algorithms/dispatch.h) makes the operation, then post +
// wait (or a request, or, inside bagua_group_start/end, post now and wait at the end).
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include <fmt/format.h>

#include "algorithms/dispatch.h"
#include "api/api_guard.h"
#include "api/op_helpers.h"
#include "base/backoff.h"

namespace bagua {

namespace {

struct GroupState {
  int depth = 0;
  std::vector<std::unique_ptr<bagua_request>> posted;
  // Blocking host receives: started in bagua_group_end after the group's other calls (sends first, as schedules
  // post their rounds: docs/transport.md, "Sends first"), or earlier by a bagua_test or bagua_wait inside the group
  // (whose request may need them). Not started yet, so freed with the group if it never ends.
  std::vector<std::unique_ptr<bagua_request>> receives;
  bagua_status_t receive_failure = BAGUA_SUCCESS;  // the first receive that could not start, for bagua_group_end
  // Device operations wait for bagua_group_end, which enqueues them together (submit_device_group).
  std::vector<std::unique_ptr<DeviceOperation>> device;
  // A thread that ends (or exits the process) inside a group: its posted operations are running on their
  // communicators, which still list them and their transfers. They are left to the communicators, not freed.
  ~GroupState() {
    for (auto& request : posted) (void)request.release();
  }
};
thread_local GroupState t_group;

void start_group_receives(const char* api) {
  for (auto& request : t_group.receives) {
    bagua_comm* comm = request->comm;
    bagua_status_t status = guarded(comm, api, [&] {
      t_group.posted.reserve(t_group.posted.size() + 1);  // once started, it must reach the list
      comm->impl->start(*request->op);
    });
    if (status == BAGUA_SUCCESS)
      t_group.posted.push_back(std::move(request));
    else if (t_group.receive_failure == BAGUA_SUCCESS)
      t_group.receive_failure = status;
  }
  t_group.receives.clear();
}

}  // namespace

bool in_open_group() { return t_group.depth > 0; }

bool open_group_holds(const bagua_comm* handle) {
  for (const auto& op : t_group.device)
    if (&op->proxy().comm() == handle->impl.get()) return true;
  for (const auto* list : {&t_group.posted, &t_group.receives})
    for (const auto& request : *list)
      if (request->comm == handle) return true;
  return false;
}

// Blocking form: post, then wait (inside a group: post now, wait in bagua_group_end).
void run_blocking(bagua_comm* handle, std::unique_ptr<Operation> op) {
  Comm& comm = *handle->impl;
  if (!op->on_device() && t_group.depth == 0) return run_to_completion(comm, *op);
  // Handed on, not waited for here: the operation holds its sequence number, so failing to hand it on (out of
  // memory) leaves this rank out of step with its peers.
  after_sequence_taken(comm, "a blocking call", [&] {
    if (op->on_device()) {  // stream-ordered: enqueued now, or with its group in bagua_group_end
      std::unique_ptr<DeviceOperation> device_op(static_cast<DeviceOperation*>(op.release()));
      if (t_group.depth > 0)
        t_group.device.push_back(std::move(device_op));
      else
        comm.device_proxy().submit(std::move(device_op));
      return;
    }
    auto request = std::make_unique<bagua_request>();
    request->comm = handle;
    request->op = std::move(op);
    if (request->op->kind() == BAGUA_OPKIND_RECV) {
      t_group.receives.push_back(std::move(request));
      return;
    }
    t_group.posted.reserve(t_group.posted.size() + 1);  // once started, it must reach the list
    comm.start(*request->op);
    t_group.posted.push_back(std::move(request));
  });
}

void post_request(bagua_comm* handle, std::unique_ptr<Operation> op, bagua_request_t* req) {
  Comm& comm = *handle->impl;
  // The operation holds its sequence number: failing to post it (out of memory) leaves this rank out of step.
  after_sequence_taken(comm, "a request", [&] {
    auto request = std::make_unique<bagua_request>();
    request->comm = handle;
    {
      std::lock_guard<std::mutex> lock(handle->requests_mutex);
      handle->open_requests.reserve(handle->open_requests.size() + 1);
    }
    if (op->on_device()) {
      request->device = std::make_shared<DeviceCompletion>();
      comm.device_proxy().submit(std::unique_ptr<DeviceOperation>(static_cast<DeviceOperation*>(op.release())),
                                 request->device);
    } else {
      request->op = std::move(op);
      comm.start(*request->op);
    }
    std::lock_guard<std::mutex> lock(handle->requests_mutex);
    handle->open_requests.push_back(request.get());  // (room reserved above)
    *req = request.release();
  });
}

void detach_open_requests(bagua_comm* handle) {
  std::lock_guard<std::mutex> lock(handle->requests_mutex);
  // Device requests: the proxy completes every one of them as the communicator goes (~DeviceProxy).
  std::vector<bagua_request*> host;
  std::vector<std::unique_ptr<Operation>*> slots;
  for (bagua_request* request : handle->open_requests) {
    if (request->device) continue;
    host.push_back(request);
    slots.push_back(&request->op);
  }
  std::vector<Comm::DetachedOutcome> outcomes = handle->impl->adopt_detached(slots);
  // Nothing below throws: the requests change only once the communicator holds their operations.
  for (size_t i = 0; i < host.size(); ++i) {
    host[i]->detached = true;
    host[i]->detached_status = outcomes[i].status;
    host[i]->detached_error = std::move(outcomes[i].error);
  }
  for (bagua_request* request : handle->open_requests) request->comm = nullptr;
  handle->open_requests.clear();
}

namespace {

// A request that bagua_wait or bagua_test finished: off its communicator's list (while it has one), then freed.
void free_request(bagua_request* req) {
  if (bagua_comm* comm = req->comm) {
    std::lock_guard<std::mutex> lock(comm->requests_mutex);
    auto& open = comm->open_requests;
    open.erase(std::remove(open.begin(), open.end(), req), open.end());
  }
  delete req;
}

void finish_host_request(bagua_request* req) {
  req->comm->impl->forget(*req->op);
  free_request(req);
}

// A request whose communicator was destroyed before it finished (detach_open_requests).
bagua_status_t finish_detached_request(bagua_request* req, const char* api) {
  bagua_status_t status = req->detached_status;
  std::string error = std::move(req->detached_error);
  delete req;
  if (status == BAGUA_SUCCESS) return status;
  return guarded(nullptr, api, [&] { throw Error(status, error); });
}

}  // namespace

namespace {

// Whether a device request has completed; one staged on its caller's stream has its output copied back by this thread
// (DeviceProxy::complete_request).
bool device_request_done(bagua_request* req) {
  DeviceCompletion& c = *req->device;
  if (c.done.load(std::memory_order_acquire)) return true;
  if (req->comm == nullptr) {  // destroyed: its proxy completed every request as it went (never expected here)
    c.status = BAGUA_ERR_ABORTED;
    c.error = "bagua_comm_destroy came before the request completed";
    c.done.store(true, std::memory_order_release);
    return true;
  }
  try {
    return req->comm->impl->device_proxy().complete_request(c);
  } catch (const std::exception& e) {  // (it reports runtime failures in the completion; this is out of memory)
    c.status = BAGUA_ERR_INTERNAL;
    c.error = e.what();
    c.done.store(true, std::memory_order_release);
    return true;
  }
}

// The status of a finished device request, with its error recorded as bagua_get_last_error's.
bagua_status_t finish_device_request(bagua_request* req) {
  const DeviceCompletion& c = *req->device;
  if (c.status == BAGUA_SUCCESS) return BAGUA_SUCCESS;
  // (After the communicator's destruction the error is the thread's last, not the communicator's.)
  return guarded(req->comm, "bagua_wait", [&] { throw Error(c.status, c.error); });
}

CollectiveArgs alltoallv_args(const void* sendbuf, const size_t* sendcounts, const size_t* sdispls, void* recvbuf,
                              const size_t* recvcounts, const size_t* rdispls, bagua_datatype_t dtype) {
  CollectiveArgs a = args_of(Collective::kAlltoallv, sendbuf, recvbuf, 0, dtype);
  a.sendcounts = sendcounts;
  a.sdispls = sdispls;
  a.recvcounts = recvcounts;
  a.rdispls = rdispls;
  return a;
}

// One blocking and one non-blocking entry point per collective.
bagua_status_t blocking(void* stream, bagua_comm_t comm, const char* name, CollectiveArgs args) {
  args.stream = stream;
  args.phases_allowed = !in_open_group();
  args.in_group = in_open_group();
  return guarded(comm, name, [&] { run_blocking(comm, make_collective(require_comm(comm), args)); });
}

bagua_status_t nonblocking(bagua_comm_t comm, const char* name, const CollectiveArgs& args, bagua_request_t* req) {
  return guarded(comm, name, [&] {
    Comm& c = require_comm(comm);
    require_pointer(req, "req");
    post_request(comm, make_collective(c, args), req);
  });
}

}  // namespace
}  // namespace bagua

using namespace bagua;

extern "C" {

bagua_status_t bagua_allreduce(const void* sendbuf, void* recvbuf, size_t count, bagua_datatype_t dtype,
                               bagua_redop_t op, bagua_comm_t comm, void* stream) {
  return blocking(stream, comm, "bagua_allreduce", args_of(Collective::kAllreduce, sendbuf, recvbuf, count, dtype, op));
}
bagua_status_t bagua_iallreduce(const void* sendbuf, void* recvbuf, size_t count, bagua_datatype_t dtype,
                                bagua_redop_t op, bagua_comm_t comm, bagua_request_t* req) {
  return nonblocking(comm, "bagua_iallreduce", args_of(Collective::kAllreduce, sendbuf, recvbuf, count, dtype, op),
                     req);
}
bagua_status_t bagua_reduce_scatter(const void* sendbuf, void* recvbuf, size_t recvcount, bagua_datatype_t dtype,
                                    bagua_redop_t op, bagua_comm_t comm, void* stream) {
  return blocking(stream, comm, "bagua_reduce_scatter",
                  args_of(Collective::kReduceScatter, sendbuf, recvbuf, recvcount, dtype, op));
}
bagua_status_t bagua_ireduce_scatter(const void* sendbuf, void* recvbuf, size_t recvcount, bagua_datatype_t dtype,
                                     bagua_redop_t op, bagua_comm_t comm, bagua_request_t* req) {
  return nonblocking(comm, "bagua_ireduce_scatter",
                     args_of(Collective::kReduceScatter, sendbuf, recvbuf, recvcount, dtype, op), req);
}
bagua_status_t bagua_allgather(const void* sendbuf, void* recvbuf, size_t sendcount, bagua_datatype_t dtype,
                               bagua_comm_t comm, void* stream) {
  return blocking(stream, comm, "bagua_allgather", args_of(Collective::kAllgather, sendbuf, recvbuf, sendcount, dtype));
}
bagua_status_t bagua_iallgather(const void* sendbuf, void* recvbuf, size_t sendcount, bagua_datatype_t dtype,
                                bagua_comm_t comm, bagua_request_t* req) {
  return nonblocking(comm, "bagua_iallgather", args_of(Collective::kAllgather, sendbuf, recvbuf, sendcount, dtype),
                     req);
}
bagua_status_t bagua_broadcast(const void* sendbuf, void* recvbuf, size_t count, bagua_datatype_t dtype, int root,
                               bagua_comm_t comm, void* stream) {
  return blocking(stream, comm, "bagua_broadcast",
                  args_of(Collective::kBroadcast, sendbuf, recvbuf, count, dtype, BAGUA_SUM, root));
}
bagua_status_t bagua_ibroadcast(const void* sendbuf, void* recvbuf, size_t count, bagua_datatype_t dtype, int root,
                                bagua_comm_t comm, bagua_request_t* req) {
  return nonblocking(comm, "bagua_ibroadcast",
                     args_of(Collective::kBroadcast, sendbuf, recvbuf, count, dtype, BAGUA_SUM, root), req);
}
bagua_status_t bagua_reduce(const void* sendbuf, void* recvbuf, size_t count, bagua_datatype_t dtype, bagua_redop_t op,
                            int root, bagua_comm_t comm, void* stream) {
  return blocking(stream, comm, "bagua_reduce", args_of(Collective::kReduce, sendbuf, recvbuf, count, dtype, op, root));
}
bagua_status_t bagua_ireduce(const void* sendbuf, void* recvbuf, size_t count, bagua_datatype_t dtype, bagua_redop_t op,
                             int root, bagua_comm_t comm, bagua_request_t* req) {
  return nonblocking(comm, "bagua_ireduce", args_of(Collective::kReduce, sendbuf, recvbuf, count, dtype, op, root),
                     req);
}
bagua_status_t bagua_alltoall(const void* sendbuf, void* recvbuf, size_t count, bagua_datatype_t dtype,
                              bagua_comm_t comm, void* stream) {
  return blocking(stream, comm, "bagua_alltoall", args_of(Collective::kAlltoall, sendbuf, recvbuf, count, dtype));
}
bagua_status_t bagua_ialltoall(const void* sendbuf, void* recvbuf, size_t count, bagua_datatype_t dtype,
                               bagua_comm_t comm, bagua_request_t* req) {
  return nonblocking(comm, "bagua_ialltoall", args_of(Collective::kAlltoall, sendbuf, recvbuf, count, dtype), req);
}
bagua_status_t bagua_alltoallv(const void* sendbuf, const size_t* sendcounts, const size_t* sdispls, void* recvbuf,
                               const size_t* recvcounts, const size_t* rdispls, bagua_datatype_t dtype,
                               bagua_comm_t comm, void* stream) {
  return blocking(stream, comm, "bagua_alltoallv",
                  alltoallv_args(sendbuf, sendcounts, sdispls, recvbuf, recvcounts, rdispls, dtype));
}
bagua_status_t bagua_ialltoallv(const void* sendbuf, const size_t* sendcounts, const size_t* sdispls, void* recvbuf,
                                const size_t* recvcounts, const size_t* rdispls, bagua_datatype_t dtype,
                                bagua_comm_t comm, bagua_request_t* req) {
  return nonblocking(comm, "bagua_ialltoallv",
                     alltoallv_args(sendbuf, sendcounts, sdispls, recvbuf, recvcounts, rdispls, dtype), req);
}
bagua_status_t bagua_gather(const void* sendbuf, void* recvbuf, size_t sendcount, bagua_datatype_t dtype, int root,
                            bagua_comm_t comm, void* stream) {
  return blocking(stream, comm, "bagua_gather",
                  args_of(Collective::kGather, sendbuf, recvbuf, sendcount, dtype, BAGUA_SUM, root));
}
bagua_status_t bagua_igather(const void* sendbuf, void* recvbuf, size_t sendcount, bagua_datatype_t dtype, int root,
                             bagua_comm_t comm, bagua_request_t* req) {
  return nonblocking(comm, "bagua_igather",
                     args_of(Collective::kGather, sendbuf, recvbuf, sendcount, dtype, BAGUA_SUM, root), req);
}
bagua_status_t bagua_scatter(const void* sendbuf, void* recvbuf, size_t recvcount, bagua_datatype_t dtype, int root,
                             bagua_comm_t comm, void* stream) {
  return blocking(stream, comm, "bagua_scatter",
                  args_of(Collective::kScatter, sendbuf, recvbuf, recvcount, dtype, BAGUA_SUM, root));
}
bagua_status_t bagua_iscatter(const void* sendbuf, void* recvbuf, size_t recvcount, bagua_datatype_t dtype, int root,
                              bagua_comm_t comm, bagua_request_t* req) {
  return nonblocking(comm, "bagua_iscatter",
                     args_of(Collective::kScatter, sendbuf, recvbuf, recvcount, dtype, BAGUA_SUM, root), req);
}
bagua_status_t bagua_barrier(bagua_comm_t comm, void* stream) {
  return blocking(stream, comm, "bagua_barrier", args_of(Collective::kBarrier, nullptr, nullptr, 0, BAGUA_UINT8));
}
bagua_status_t bagua_ibarrier(bagua_comm_t comm, bagua_request_t* req) {
  return nonblocking(comm, "bagua_ibarrier", args_of(Collective::kBarrier, nullptr, nullptr, 0, BAGUA_UINT8), req);
}

bagua_status_t bagua_send(const void* buf, size_t count, bagua_datatype_t dtype, int peer, bagua_comm_t comm,
                          void* stream) {
  return guarded(comm, "bagua_send",
                 [&] { run_blocking(comm, make_send(require_comm(comm), buf, count, dtype, peer, stream)); });
}
bagua_status_t bagua_recv(void* buf, size_t count, bagua_datatype_t dtype, int peer, bagua_comm_t comm, void* stream) {
  return guarded(comm, "bagua_recv",
                 [&] { run_blocking(comm, make_recv(require_comm(comm), buf, count, dtype, peer, stream)); });
}
bagua_status_t bagua_isend(const void* buf, size_t count, bagua_datatype_t dtype, int peer, bagua_comm_t comm,
                           bagua_request_t* req) {
  return guarded(comm, "bagua_isend", [&] {
    Comm& c = require_comm(comm);
    require_pointer(req, "req");
    post_request(comm, make_send(c, buf, count, dtype, peer), req);
  });
}
bagua_status_t bagua_irecv(void* buf, size_t count, bagua_datatype_t dtype, int peer, bagua_comm_t comm,
                           bagua_request_t* req) {
  return guarded(comm, "bagua_irecv", [&] {
    Comm& c = require_comm(comm);
    require_pointer(req, "req");
    post_request(comm, make_recv(c, buf, count, dtype, peer), req);
  });
}

namespace bagua {
namespace {

// A group whose device calls can all run on their caller's stream, with every call of the group (host calls too) on
// one communicator, runs them that way (docs/cuda.md, "The IPC path on the caller's stream"), one after the other in
// call order, which is their sequence order on every rank. Otherwise every call stages and they start together, as
// ungrouped calls would allow: calls on several communicators may come in different orders on different ranks, and
// a call on its caller's stream holds the stream until its peers reach it. Returns the first failure; `device` keeps
// the calls still to submit (after a failure, those not replaced yet: the communicator has failed).
bagua_status_t submit_caller_stream_alternatives(std::vector<std::unique_ptr<DeviceOperation>>& device) {
  Comm* only = &device.front()->proxy().comm();
  for (const auto& op : device)
    if (&op->proxy().comm() != only || !op->has_caller_stream_alternative()) return BAGUA_SUCCESS;
  for (const auto* list : {&t_group.posted, &t_group.receives})
    for (const auto& request : *list)
      if (request->comm->impl.get() != only) return BAGUA_SUCCESS;
  bagua_status_t first = BAGUA_SUCCESS;
  for (auto& op : device) {
    DeviceOperation::Alternative build = op->take_caller_stream_alternative();
    StagingLease room = op->take_room();
    op.reset();
    first = guarded(nullptr, "bagua_group_end", [&] {
      std::unique_ptr<DeviceOperation> alone;
      try {
        alone = build(std::move(room));
      } catch (const Error& e) {  // the sequence number was taken at the call: the ranks are out of step
        only->fail_now(e.status(), e.what());
        throw;
      } catch (const std::exception& e) {
        only->fail_now(BAGUA_ERR_SYSTEM, fmt::format("bagua_group_end: building a device call failed: {}", e.what()));
        throw;
      } catch (...) {
        only->fail_now(BAGUA_ERR_SYSTEM, "bagua_group_end: building a device call failed (unknown exception)");
        throw;
      }
      only->device_proxy().submit(std::move(alone));
    });
    if (first != BAGUA_SUCCESS) break;
  }
  device.erase(std::remove(device.begin(), device.end(), nullptr), device.end());
  return first;
}

}  // namespace
}  // namespace bagua

bagua_status_t bagua_group_start(void) {
  ++t_group.depth;
  return BAGUA_SUCCESS;
}

bagua_status_t bagua_group_end(void) {
  if (t_group.depth == 0)
    return guarded(nullptr, "bagua_group_end",
                   [] { fail(BAGUA_ERR_INVALID_USAGE, "bagua_group_end without bagua_group_start"); });
  if (--t_group.depth > 0) return BAGUA_SUCCESS;
  bagua_status_t first = BAGUA_SUCCESS;
  // Device operations: enqueued on their streams together; they do not block here.
  if (!t_group.device.empty()) {
    auto device = std::move(t_group.device);
    t_group.device.clear();
    first = submit_caller_stream_alternatives(device);
    if (!device.empty()) {
      bagua_status_t status = guarded(nullptr, "bagua_group_end", [&] { submit_device_group(std::move(device)); });
      if (first == BAGUA_SUCCESS) first = status;
    }
  }
  start_group_receives("bagua_group_end");
  if (first == BAGUA_SUCCESS) first = t_group.receive_failure;
  t_group.receive_failure = BAGUA_SUCCESS;
  // Drive every posted operation round-robin (they may depend on each other across communicators);
  // report the first error, after all have finished.
  std::vector<std::unique_ptr<bagua_request>> posted = std::move(t_group.posted);
  t_group.posted.clear();
  std::vector<bool> done(posted.size(), false);
  size_t remaining = posted.size();
  Backoff backoff;
  while (remaining > 0) {
    size_t before = remaining;
    for (size_t i = 0; i < posted.size(); ++i) {
      if (done[i]) continue;
      bagua_comm* comm = posted[i]->comm;
      bool finished = false;
      bagua_status_t status = guarded(comm, "bagua_group_end", [&] { finished = comm->impl->test(*posted[i]->op); });
      if (status != BAGUA_SUCCESS) finished = true;
      if (!finished) continue;
      if (first == BAGUA_SUCCESS) first = status;
      comm->impl->forget(*posted[i]->op);
      done[i] = true;
      --remaining;
    }
    if (remaining < before)
      backoff.busy();
    else
      backoff.idle();
  }
  return first;
}

bagua_status_t bagua_test(bagua_request_t req, int* done) {
  if (req == nullptr || done == nullptr)
    return guarded(nullptr, "bagua_test",
                   [&] { fail(BAGUA_ERR_INVALID_ARGUMENT, "{} is NULL", req ? "done" : "req"); });
  bagua_comm* comm = req->comm;
  start_group_receives("bagua_test");
  if (req->detached) {
    *done = 1;
    return finish_detached_request(req, "bagua_test");
  }
  if (req->device) {
    *done = device_request_done(req) ? 1 : 0;
    if (!*done) return BAGUA_IN_PROGRESS;
    bagua_status_t status = finish_device_request(req);
    free_request(req);
    return status;
  }
  bool finished = true;
  bagua_status_t status = guarded(comm, "bagua_test", [&]() -> bagua_status_t {
    finished = comm->impl->test(*req->op);
    return finished ? BAGUA_SUCCESS : BAGUA_IN_PROGRESS;
  });
  *done = finished ? 1 : 0;
  if (finished) finish_host_request(req);
  return status;
}

bagua_status_t bagua_wait(bagua_request_t req) {
  if (req == nullptr) return guarded(nullptr, "bagua_wait", [] { fail(BAGUA_ERR_INVALID_ARGUMENT, "req is NULL"); });
  bagua_comm* comm = req->comm;
  start_group_receives("bagua_wait");
  if (req->detached) return finish_detached_request(req, "bagua_wait");
  if (req->device) {
    // The proxy ends the operation once the caller's stream reaches it plus at most the watchdog's timeout, and at
    // once on failure or abort; the copy of a staged output back takes at most the timeout.
    Backoff backoff;
    while (!device_request_done(req)) backoff.idle();
    bagua_status_t status = finish_device_request(req);
    free_request(req);
    return status;
  }
  bagua_status_t status = guarded(comm, "bagua_wait", [&] { comm->impl->wait(*req->op); });
  finish_host_request(req);
  return status;
}

bagua_status_t bagua_comm_get_async_error(bagua_comm_t comm, bagua_status_t* async_error) {
  return guarded(comm, "bagua_comm_get_async_error", [&] {
    Comm& c = require_comm(comm);
    require_pointer(async_error, "async_error");
    *async_error = c.async_error();
  });
}

bagua_status_t bagua_comm_get_stats(bagua_comm_t comm, bagua_stats_t* stats) {
  return guarded(comm, "bagua_comm_get_stats", [&] {
    Comm& c = require_comm(comm);
    require_pointer(stats, "stats");
    if (stats->size < offsetof(bagua_stats_t, ops) || stats->size > (1u << 20))
      fail(BAGUA_ERR_INVALID_ARGUMENT, "stats->size {} is not a bagua_stats_t size: set it to sizeof(bagua_stats_t)",
           stats->size);
    if (c.has_device_proxy()) c.device_proxy().settle();  // (device calls that have ended on their streams)
    bagua_stats_t full = c.stats();
    size_t caller_size = stats->size;
    std::memcpy(stats, &full, std::min(caller_size, sizeof(full)));
    stats->size = std::min(caller_size, sizeof(full));
  });
}

bagua_status_t bagua_comm_dump_trace(bagua_comm_t comm, const char* path) {
  return guarded(comm, "bagua_comm_dump_trace", [&] { require_comm(comm).dump_trace_now(path ? path : ""); });
}

}  // extern "C"

// extern "C" entry points for operations: argument checks, algorithm choice, then post + wait (or a request,
// or, inside bagua_group_start/end, post now and wait at the end).
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "algorithms/collectives.h"
#include "algorithms/p2p.h"
#include "algorithms/tags.h"
#include "api/api_guard.h"
#include "api/op_helpers.h"
#include "core/backoff.h"
#include "kernels/dtype.h"
#include "kernels/memory_type.h"

namespace bagua {

namespace {

struct GroupState {
  int depth = 0;
  std::vector<std::unique_ptr<bagua_request>> posted;
};
thread_local GroupState t_group;

}  // namespace

size_t checked_bytes(size_t count, bagua_datatype_t dtype, const char* what, size_t multiplier) {
  if (!valid_datatype(dtype))
    fail(BAGUA_ERR_INVALID_ARGUMENT, "datatype {} is not a bagua_datatype_t", static_cast<int>(dtype));
  size_t size = datatype_size(dtype);
  if (multiplier == 0 || count > static_cast<size_t>(PTRDIFF_MAX) / size / multiplier)
    fail(BAGUA_ERR_INVALID_ARGUMENT, "{} {} of {} overflows the address space", what, count, datatype_name(dtype));
  return count * size * multiplier;
}

void check_dtype_in(bagua_datatype_t dtype, std::initializer_list<bagua_datatype_t> allowed, const char* what) {
  if (!valid_datatype(dtype))
    fail(BAGUA_ERR_INVALID_ARGUMENT, "datatype {} is not a bagua_datatype_t", static_cast<int>(dtype));
  std::string names;
  for (bagua_datatype_t t : allowed) {
    if (t == dtype) return;
    names += fmt::format("{}{}", names.empty() ? "" : ", ", datatype_name(t));
  }
  fail(BAGUA_ERR_INVALID_ARGUMENT, "{} takes {}, not {}", what, names, datatype_name(dtype));
}

void check_redop(bagua_redop_t op) {
  if (!valid_redop(op)) fail(BAGUA_ERR_INVALID_ARGUMENT, "op {} is not a bagua_redop_t", static_cast<int>(op));
}

void check_buffer(const void* buf, size_t bytes, const char* name) {
  if (bytes > 0 && buf == nullptr) fail(BAGUA_ERR_INVALID_ARGUMENT, "{} is NULL with a non-zero count", name);
  if (bytes == 0 || buf == nullptr) return;
  MemoryType type = detect_memory_type(buf);
  if (type != MemoryType::kHost)
    fail(BAGUA_ERR_NOT_SUPPORTED, "{} is {} memory, which this version of bagua does not support yet", name,
         memory_type_name(type));
}

void check_rank(const Comm& comm, int rank, const char* what) {
  if (rank < 0 || rank >= comm.size())
    fail(BAGUA_ERR_INVALID_ARGUMENT, "{} {} is outside [0, {})", what, rank, comm.size());
}

bool overlap(const void* a, size_t a_bytes, const void* b, size_t b_bytes) {
  auto x = reinterpret_cast<uintptr_t>(a);
  auto y = reinterpret_cast<uintptr_t>(b);
  return a_bytes > 0 && b_bytes > 0 && x < y + b_bytes && y < x + a_bytes;
}

namespace {

// In place exactly when `send` == `in_place_at`; any other overlap is an error.
void check_in_place(const void* send, size_t send_bytes, const void* recv, size_t recv_bytes, const void* in_place_at) {
  if (send == in_place_at) return;
  if (overlap(send, send_bytes, recv, recv_bytes))
    fail(BAGUA_ERR_INVALID_ARGUMENT,
         "sendbuf and recvbuf overlap but are not in place (see the in-place rule of this call)");
}

const uint8_t* at(const void* p, size_t offset) { return static_cast<const uint8_t*>(p) + offset; }

// Validates `args` for its collective (no side effect), picks the algorithm and builds the operation.
std::unique_ptr<Operation> make_collective(Comm& comm, CollectiveArgs args) {
  const int n = comm.size(), r = comm.rank();
  if (args.collective != Collective::kBarrier) {
    if (args.collective == Collective::kAllreduce || args.collective == Collective::kReduce ||
        args.collective == Collective::kReduceScatter)
      check_redop(args.op);
    else
      args.op = BAGUA_SUM;
  }
  bool rooted = args.collective == Collective::kBroadcast || args.collective == Collective::kReduce ||
                args.collective == Collective::kGather || args.collective == Collective::kScatter;
  if (rooted) check_rank(comm, args.root, "root");
  switch (args.collective) {
    case Collective::kAllreduce: {
      size_t bytes = checked_bytes(args.count, args.dtype, "count");
      check_buffer(args.sendbuf, bytes, "sendbuf");
      check_buffer(args.recvbuf, bytes, "recvbuf");
      check_in_place(args.sendbuf, bytes, args.recvbuf, bytes, args.recvbuf);
      break;
    }
    case Collective::kBroadcast: {
      size_t bytes = checked_bytes(args.count, args.dtype, "count");
      check_buffer(args.recvbuf, bytes, "recvbuf");
      if (r == args.root) {
        check_buffer(args.sendbuf, bytes, "sendbuf");
        check_in_place(args.sendbuf, bytes, args.recvbuf, bytes, args.recvbuf);
      }
      break;
    }
    case Collective::kReduce: {
      size_t bytes = checked_bytes(args.count, args.dtype, "count");
      check_buffer(args.sendbuf, bytes, "sendbuf");
      if (r == args.root) {
        check_buffer(args.recvbuf, bytes, "recvbuf");
        check_in_place(args.sendbuf, bytes, args.recvbuf, bytes, args.recvbuf);
      }
      break;
    }
    case Collective::kAllgather: {
      size_t block = checked_bytes(args.count, args.dtype, "sendcount");
      size_t total = checked_bytes(args.count, args.dtype, "sendcount", n);
      check_buffer(args.sendbuf, block, "sendbuf");
      check_buffer(args.recvbuf, total, "recvbuf");
      check_in_place(args.sendbuf, block, args.recvbuf, total, at(args.recvbuf, r * block));
      break;
    }
    case Collective::kReduceScatter: {
      size_t block = checked_bytes(args.count, args.dtype, "recvcount");
      size_t total = checked_bytes(args.count, args.dtype, "recvcount", n);
      check_buffer(args.sendbuf, total, "sendbuf");
      check_buffer(args.recvbuf, block, "recvbuf");
      if (args.recvbuf != at(args.sendbuf, r * block) && overlap(args.sendbuf, total, args.recvbuf, block))
        fail(BAGUA_ERR_INVALID_ARGUMENT, "recvbuf overlaps sendbuf but is not sendbuf + rank * recvcount (in place)");
      break;
    }
    case Collective::kAlltoall: {
      size_t total = checked_bytes(args.count, args.dtype, "count", n);
      check_buffer(args.sendbuf, total, "sendbuf");
      check_buffer(args.recvbuf, total, "recvbuf");
      if (overlap(args.sendbuf, total, args.recvbuf, total))
        fail(BAGUA_ERR_INVALID_ARGUMENT, "alltoall has no in-place form: sendbuf and recvbuf overlap");
      break;
    }
    case Collective::kAlltoallv: {
      require_pointer(args.sendcounts, "sendcounts");
      require_pointer(args.sdispls, "sdispls");
      require_pointer(args.recvcounts, "recvcounts");
      require_pointer(args.rdispls, "rdispls");
      if (args.sendcounts[r] != args.recvcounts[r])
        fail(BAGUA_ERR_INVALID_ARGUMENT,
             "sendcounts[{}] = {} but recvcounts[{}] = {}: what a rank sends itself must fit", r, args.sendcounts[r], r,
             args.recvcounts[r]);
      size_t send_extent = 0, recv_extent = 0;
      for (int p = 0; p < n; ++p) {
        size_t s_end = checked_bytes(args.sdispls[p], args.dtype, "sdispls");
        size_t s_len = checked_bytes(args.sendcounts[p], args.dtype, "sendcounts");
        size_t r_end = checked_bytes(args.rdispls[p], args.dtype, "rdispls");
        size_t r_len = checked_bytes(args.recvcounts[p], args.dtype, "recvcounts");
        if (s_end > PTRDIFF_MAX - s_len || r_end > PTRDIFF_MAX - r_len)
          fail(BAGUA_ERR_INVALID_ARGUMENT, "displacement + count for peer {} overflows", p);
        if (s_len) send_extent = std::max(send_extent, s_end + s_len);
        if (r_len) recv_extent = std::max(recv_extent, r_end + r_len);
      }
      check_buffer(args.sendbuf, send_extent, "sendbuf");
      check_buffer(args.recvbuf, recv_extent, "recvbuf");
      if (overlap(args.sendbuf, send_extent, args.recvbuf, recv_extent))
        fail(BAGUA_ERR_INVALID_ARGUMENT, "alltoallv has no in-place form: sendbuf and recvbuf overlap");
      break;
    }
    case Collective::kGather: {
      size_t block = checked_bytes(args.count, args.dtype, "sendcount");
      size_t total = checked_bytes(args.count, args.dtype, "sendcount", n);
      check_buffer(args.sendbuf, block, "sendbuf");
      if (r == args.root) {
        check_buffer(args.recvbuf, total, "recvbuf");
        check_in_place(args.sendbuf, block, args.recvbuf, total, at(args.recvbuf, r * block));
      }
      break;
    }
    case Collective::kScatter: {
      size_t block = checked_bytes(args.count, args.dtype, "recvcount");
      size_t total = checked_bytes(args.count, args.dtype, "recvcount", n);
      check_buffer(args.recvbuf, block, "recvbuf");
      if (r == args.root) {
        check_buffer(args.sendbuf, total, "sendbuf");
        if (args.recvbuf != at(args.sendbuf, r * block) && overlap(args.sendbuf, total, args.recvbuf, block))
          fail(BAGUA_ERR_INVALID_ARGUMENT, "recvbuf overlaps sendbuf but is not sendbuf + root * recvcount (in place)");
      }
      break;
    }
    case Collective::kBarrier:
    case Collective::kCount: break;
  }
  comm.check_usable();
  Algorithm algorithm = comm.selector().choose(args.collective, args.message_bytes(n), n, comm.hosts());
  ScheduleContext ctx{r,
                      n,
                      comm.id(),
                      comm.next_collective_sequence(),
                      tag_kind_of(args.collective),
                      args.dtype,
                      args.op,
                      comm.config().ring_segment_bytes,
                      comm.config().ring_window,
                      comm.ring_order(),
                      comm.hosts(),
                      [&comm] { comm.check_peers_now(); }};
  std::string description = args.collective == Collective::kBarrier
                                ? fmt::format("barrier #{}", ctx.sequence)
                                : fmt::format("{} #{} ({} x {}, {})", collective_name(args.collective), ctx.sequence,
                                              args.count, datatype_name(args.dtype), algorithm_name(algorithm));
  BAGUA_TRACE("posting {}", description);
  return build_collective(args, algorithm, ctx, std::move(description));
}

std::unique_ptr<Operation> make_send(Comm& comm, const void* buf, size_t count, bagua_datatype_t dtype, int peer) {
  size_t bytes = checked_bytes(count, dtype, "count");
  check_buffer(buf, bytes, "buf");
  check_rank(comm, peer, "peer");
  comm.check_usable();
  uint64_t seq = comm.next_send_sequence(peer);
  uint64_t tag = make_tag(TagKind::kP2P, comm.id(), seq, 0, comm.rank());
  return std::make_unique<SendOp>(
      buf, bytes, peer, tag, fmt::format("send #{} of {} x {} to rank {}", seq, count, datatype_name(dtype), peer));
}

std::unique_ptr<Operation> make_recv(Comm& comm, void* buf, size_t count, bagua_datatype_t dtype, int peer) {
  size_t bytes = checked_bytes(count, dtype, "count");
  check_buffer(buf, bytes, "buf");
  check_rank(comm, peer, "peer");
  comm.check_usable();
  uint64_t seq = comm.next_recv_sequence(peer);
  uint64_t tag = make_tag(TagKind::kP2P, comm.id(), seq, 0, peer);
  return std::make_unique<RecvOp>(
      buf, bytes, peer, tag,
      fmt::format("receive #{} of {} x {} from rank {}", seq, count, datatype_name(dtype), peer));
}

}  // namespace

// Blocking form: post, then wait (inside a group: post now, wait in bagua_group_end).
void run_blocking(bagua_comm* handle, std::unique_ptr<Operation> op) {
  Comm& comm = *handle->impl;
  if (t_group.depth > 0) {
    auto request = std::make_unique<bagua_request>();
    request->comm = handle;
    request->op = std::move(op);
    comm.start(*request->op);
    t_group.posted.push_back(std::move(request));
    return;
  }
  struct Release {
    Comm& comm;
    Operation& op;
    ~Release() { comm.forget(op); }
  } release{comm, *op};
  comm.start(*op);
  comm.wait(*op);
}

void post_request(bagua_comm* handle, std::unique_ptr<Operation> op, bagua_request_t* req) {
  auto request = std::make_unique<bagua_request>();
  request->comm = handle;
  request->op = std::move(op);
  handle->impl->start(*request->op);
  *req = request.release();
}

namespace {

CollectiveArgs args_of(Collective c, const void* sendbuf, void* recvbuf, size_t count, bagua_datatype_t dtype,
                       bagua_redop_t op = BAGUA_SUM, int root = 0) {
  CollectiveArgs a;
  a.collective = c;
  a.sendbuf = sendbuf;
  a.recvbuf = recvbuf;
  a.count = count;
  a.dtype = dtype;
  a.op = op;
  a.root = root;
  return a;
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
bagua_status_t blocking(bagua_comm_t comm, const char* name, const CollectiveArgs& args) {
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
                               bagua_redop_t op, bagua_comm_t comm, void*) {
  return blocking(comm, "bagua_allreduce", args_of(Collective::kAllreduce, sendbuf, recvbuf, count, dtype, op));
}
bagua_status_t bagua_iallreduce(const void* sendbuf, void* recvbuf, size_t count, bagua_datatype_t dtype,
                                bagua_redop_t op, bagua_comm_t comm, bagua_request_t* req) {
  return nonblocking(comm, "bagua_iallreduce", args_of(Collective::kAllreduce, sendbuf, recvbuf, count, dtype, op),
                     req);
}
bagua_status_t bagua_reduce_scatter(const void* sendbuf, void* recvbuf, size_t recvcount, bagua_datatype_t dtype,
                                    bagua_redop_t op, bagua_comm_t comm, void*) {
  return blocking(comm, "bagua_reduce_scatter",
                  args_of(Collective::kReduceScatter, sendbuf, recvbuf, recvcount, dtype, op));
}
bagua_status_t bagua_ireduce_scatter(const void* sendbuf, void* recvbuf, size_t recvcount, bagua_datatype_t dtype,
                                     bagua_redop_t op, bagua_comm_t comm, bagua_request_t* req) {
  return nonblocking(comm, "bagua_ireduce_scatter",
                     args_of(Collective::kReduceScatter, sendbuf, recvbuf, recvcount, dtype, op), req);
}
bagua_status_t bagua_allgather(const void* sendbuf, void* recvbuf, size_t sendcount, bagua_datatype_t dtype,
                               bagua_comm_t comm, void*) {
  return blocking(comm, "bagua_allgather", args_of(Collective::kAllgather, sendbuf, recvbuf, sendcount, dtype));
}
bagua_status_t bagua_iallgather(const void* sendbuf, void* recvbuf, size_t sendcount, bagua_datatype_t dtype,
                                bagua_comm_t comm, bagua_request_t* req) {
  return nonblocking(comm, "bagua_iallgather", args_of(Collective::kAllgather, sendbuf, recvbuf, sendcount, dtype),
                     req);
}
bagua_status_t bagua_broadcast(const void* sendbuf, void* recvbuf, size_t count, bagua_datatype_t dtype, int root,
                               bagua_comm_t comm, void*) {
  return blocking(comm, "bagua_broadcast",
                  args_of(Collective::kBroadcast, sendbuf, recvbuf, count, dtype, BAGUA_SUM, root));
}
bagua_status_t bagua_ibroadcast(const void* sendbuf, void* recvbuf, size_t count, bagua_datatype_t dtype, int root,
                                bagua_comm_t comm, bagua_request_t* req) {
  return nonblocking(comm, "bagua_ibroadcast",
                     args_of(Collective::kBroadcast, sendbuf, recvbuf, count, dtype, BAGUA_SUM, root), req);
}
bagua_status_t bagua_reduce(const void* sendbuf, void* recvbuf, size_t count, bagua_datatype_t dtype, bagua_redop_t op,
                            int root, bagua_comm_t comm, void*) {
  return blocking(comm, "bagua_reduce", args_of(Collective::kReduce, sendbuf, recvbuf, count, dtype, op, root));
}
bagua_status_t bagua_ireduce(const void* sendbuf, void* recvbuf, size_t count, bagua_datatype_t dtype, bagua_redop_t op,
                             int root, bagua_comm_t comm, bagua_request_t* req) {
  return nonblocking(comm, "bagua_ireduce", args_of(Collective::kReduce, sendbuf, recvbuf, count, dtype, op, root),
                     req);
}
bagua_status_t bagua_alltoall(const void* sendbuf, void* recvbuf, size_t count, bagua_datatype_t dtype,
                              bagua_comm_t comm, void*) {
  return blocking(comm, "bagua_alltoall", args_of(Collective::kAlltoall, sendbuf, recvbuf, count, dtype));
}
bagua_status_t bagua_ialltoall(const void* sendbuf, void* recvbuf, size_t count, bagua_datatype_t dtype,
                               bagua_comm_t comm, bagua_request_t* req) {
  return nonblocking(comm, "bagua_ialltoall", args_of(Collective::kAlltoall, sendbuf, recvbuf, count, dtype), req);
}
bagua_status_t bagua_alltoallv(const void* sendbuf, const size_t* sendcounts, const size_t* sdispls, void* recvbuf,
                               const size_t* recvcounts, const size_t* rdispls, bagua_datatype_t dtype,
                               bagua_comm_t comm, void*) {
  return blocking(comm, "bagua_alltoallv",
                  alltoallv_args(sendbuf, sendcounts, sdispls, recvbuf, recvcounts, rdispls, dtype));
}
bagua_status_t bagua_ialltoallv(const void* sendbuf, const size_t* sendcounts, const size_t* sdispls, void* recvbuf,
                                const size_t* recvcounts, const size_t* rdispls, bagua_datatype_t dtype,
                                bagua_comm_t comm, bagua_request_t* req) {
  return nonblocking(comm, "bagua_ialltoallv",
                     alltoallv_args(sendbuf, sendcounts, sdispls, recvbuf, recvcounts, rdispls, dtype), req);
}
bagua_status_t bagua_gather(const void* sendbuf, void* recvbuf, size_t sendcount, bagua_datatype_t dtype, int root,
                            bagua_comm_t comm, void*) {
  return blocking(comm, "bagua_gather",
                  args_of(Collective::kGather, sendbuf, recvbuf, sendcount, dtype, BAGUA_SUM, root));
}
bagua_status_t bagua_igather(const void* sendbuf, void* recvbuf, size_t sendcount, bagua_datatype_t dtype, int root,
                             bagua_comm_t comm, bagua_request_t* req) {
  return nonblocking(comm, "bagua_igather",
                     args_of(Collective::kGather, sendbuf, recvbuf, sendcount, dtype, BAGUA_SUM, root), req);
}
bagua_status_t bagua_scatter(const void* sendbuf, void* recvbuf, size_t recvcount, bagua_datatype_t dtype, int root,
                             bagua_comm_t comm, void*) {
  return blocking(comm, "bagua_scatter",
                  args_of(Collective::kScatter, sendbuf, recvbuf, recvcount, dtype, BAGUA_SUM, root));
}
bagua_status_t bagua_iscatter(const void* sendbuf, void* recvbuf, size_t recvcount, bagua_datatype_t dtype, int root,
                              bagua_comm_t comm, bagua_request_t* req) {
  return nonblocking(comm, "bagua_iscatter",
                     args_of(Collective::kScatter, sendbuf, recvbuf, recvcount, dtype, BAGUA_SUM, root), req);
}
bagua_status_t bagua_barrier(bagua_comm_t comm, void*) {
  return blocking(comm, "bagua_barrier", args_of(Collective::kBarrier, nullptr, nullptr, 0, BAGUA_UINT8));
}
bagua_status_t bagua_ibarrier(bagua_comm_t comm, bagua_request_t* req) {
  return nonblocking(comm, "bagua_ibarrier", args_of(Collective::kBarrier, nullptr, nullptr, 0, BAGUA_UINT8), req);
}

bagua_status_t bagua_send(const void* buf, size_t count, bagua_datatype_t dtype, int peer, bagua_comm_t comm, void*) {
  return guarded(comm, "bagua_send",
                 [&] { run_blocking(comm, make_send(require_comm(comm), buf, count, dtype, peer)); });
}
bagua_status_t bagua_recv(void* buf, size_t count, bagua_datatype_t dtype, int peer, bagua_comm_t comm, void*) {
  return guarded(comm, "bagua_recv",
                 [&] { run_blocking(comm, make_recv(require_comm(comm), buf, count, dtype, peer)); });
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

bagua_status_t bagua_group_start(void) {
  ++t_group.depth;
  return BAGUA_SUCCESS;
}

bagua_status_t bagua_group_end(void) {
  if (t_group.depth == 0)
    return guarded(nullptr, "bagua_group_end",
                   [] { fail(BAGUA_ERR_INVALID_USAGE, "bagua_group_end without bagua_group_start"); });
  if (--t_group.depth > 0) return BAGUA_SUCCESS;
  // Drive every posted operation round-robin (they may depend on each other across communicators);
  // report the first error, after all have finished.
  std::vector<std::unique_ptr<bagua_request>> posted = std::move(t_group.posted);
  t_group.posted.clear();
  bagua_status_t first = BAGUA_SUCCESS;
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
  bool finished = true;
  bagua_status_t status = guarded(comm, "bagua_test", [&]() -> bagua_status_t {
    finished = comm->impl->test(*req->op);
    return finished ? BAGUA_SUCCESS : BAGUA_IN_PROGRESS;
  });
  *done = finished ? 1 : 0;
  if (finished) {
    comm->impl->forget(*req->op);
    delete req;
  }
  return status;
}

bagua_status_t bagua_wait(bagua_request_t req) {
  if (req == nullptr) return guarded(nullptr, "bagua_wait", [] { fail(BAGUA_ERR_INVALID_ARGUMENT, "req is NULL"); });
  bagua_comm* comm = req->comm;
  bagua_status_t status = guarded(comm, "bagua_wait", [&] { comm->impl->wait(*req->op); });
  comm->impl->forget(*req->op);
  delete req;
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
    bagua_stats_t full = c.stats();
    size_t caller_size = stats->size;
    std::memcpy(stats, &full, std::min(caller_size, sizeof(full)));
    stats->size = std::min(caller_size, sizeof(full));
  });
}

}  // extern "C"

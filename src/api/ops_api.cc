// extern "C" entry points for operations: argument checks, then post + wait (or a request).
#include <cstdint>
#include <memory>

#include "algorithms/p2p.h"
#include "algorithms/ring_allreduce.h"
#include "algorithms/tags.h"
#include "api/api_guard.h"
#include "kernels/dtype.h"
#include "kernels/memory_type.h"

struct bagua_request {
  bagua_comm* comm = nullptr;
  std::unique_ptr<bagua::Operation> op;
};

namespace bagua {

namespace {

size_t checked_bytes(size_t count, bagua_datatype_t dtype, const char* what) {
  if (!valid_datatype(dtype)) fail(BAGUA_ERR_INVALID_ARGUMENT, "datatype {} is not a bagua_datatype_t", static_cast<int>(dtype));
  size_t size = datatype_size(dtype);
  if (count > static_cast<size_t>(PTRDIFF_MAX) / size)
    fail(BAGUA_ERR_INVALID_ARGUMENT, "{} {} of {} overflows the address space", what, count, datatype_name(dtype));
  return count * size;
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

void check_peer(const Comm& comm, int peer) {
  if (peer < 0 || peer >= comm.size())
    fail(BAGUA_ERR_INVALID_ARGUMENT, "peer {} is outside [0, {})", peer, comm.size());
}

bool overlap(const void* a, const void* b, size_t bytes) {
  auto x = reinterpret_cast<uintptr_t>(a);
  auto y = reinterpret_cast<uintptr_t>(b);
  return x < y + bytes && y < x + bytes;
}

std::unique_ptr<Operation> make_allreduce(Comm& comm, const void* sendbuf, void* recvbuf, size_t count,
                                          bagua_datatype_t dtype, bagua_redop_t op) {
  size_t bytes = checked_bytes(count, dtype, "count");
  check_redop(op);
  check_buffer(sendbuf, bytes, "sendbuf");
  check_buffer(recvbuf, bytes, "recvbuf");
  if (sendbuf != recvbuf && bytes > 0 && overlap(sendbuf, recvbuf, bytes))
    fail(BAGUA_ERR_INVALID_ARGUMENT, "sendbuf and recvbuf overlap without being equal (in place needs sendbuf == recvbuf)");
  comm.check_usable();
  RingAllreduceArgs args{sendbuf, recvbuf, count, dtype, op, comm.rank(), comm.size(), comm.id(),
                         comm.next_collective_sequence()};
  return std::make_unique<RingAllreduce>(
      args, fmt::format("allreduce #{} ({} x {}, {})", args.sequence, count, datatype_name(dtype), redop_name(op)));
}

std::unique_ptr<Operation> make_send(Comm& comm, const void* buf, size_t count, bagua_datatype_t dtype, int peer) {
  size_t bytes = checked_bytes(count, dtype, "count");
  check_buffer(buf, bytes, "buf");
  check_peer(comm, peer);
  comm.check_usable();
  uint64_t seq = comm.next_send_sequence(peer);
  uint64_t tag = make_tag(TagKind::kP2P, comm.id(), seq, 0, comm.rank());
  return std::make_unique<SendOp>(buf, bytes, peer, tag,
                                  fmt::format("send #{} of {} x {} to rank {}", seq, count, datatype_name(dtype), peer));
}

std::unique_ptr<Operation> make_recv(Comm& comm, void* buf, size_t count, bagua_datatype_t dtype, int peer) {
  size_t bytes = checked_bytes(count, dtype, "count");
  check_buffer(buf, bytes, "buf");
  check_peer(comm, peer);
  comm.check_usable();
  uint64_t seq = comm.next_recv_sequence(peer);
  uint64_t tag = make_tag(TagKind::kP2P, comm.id(), seq, 0, peer);
  return std::make_unique<RecvOp>(
      buf, bytes, peer, tag, fmt::format("receive #{} of {} x {} from rank {}", seq, count, datatype_name(dtype), peer));
}

// Blocking form: post, then wait; the operation is released however it ends.
void run_blocking(Comm& comm, std::unique_ptr<Operation> op) {
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

}  // namespace
}  // namespace bagua

using namespace bagua;

extern "C" {

bagua_status_t bagua_allreduce(const void* sendbuf, void* recvbuf, size_t count, bagua_datatype_t dtype,
                               bagua_redop_t op, bagua_comm_t comm, void* stream) {
  (void)stream;
  return guarded(comm, "bagua_allreduce", [&] {
    Comm& c = require_comm(comm);
    run_blocking(c, make_allreduce(c, sendbuf, recvbuf, count, dtype, op));
  });
}

bagua_status_t bagua_send(const void* buf, size_t count, bagua_datatype_t dtype, int peer, bagua_comm_t comm,
                          void* stream) {
  (void)stream;
  return guarded(comm, "bagua_send", [&] {
    Comm& c = require_comm(comm);
    run_blocking(c, make_send(c, buf, count, dtype, peer));
  });
}

bagua_status_t bagua_recv(void* buf, size_t count, bagua_datatype_t dtype, int peer, bagua_comm_t comm, void* stream) {
  (void)stream;
  return guarded(comm, "bagua_recv", [&] {
    Comm& c = require_comm(comm);
    run_blocking(c, make_recv(c, buf, count, dtype, peer));
  });
}

bagua_status_t bagua_iallreduce(const void* sendbuf, void* recvbuf, size_t count, bagua_datatype_t dtype,
                                bagua_redop_t op, bagua_comm_t comm, bagua_request_t* req) {
  return guarded(comm, "bagua_iallreduce", [&] {
    Comm& c = require_comm(comm);
    require_pointer(req, "req");
    post_request(comm, make_allreduce(c, sendbuf, recvbuf, count, dtype, op), req);
  });
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

bagua_status_t bagua_test(bagua_request_t req, int* done) {
  if (req == nullptr || done == nullptr)
    return guarded(nullptr, "bagua_test", [&] { fail(BAGUA_ERR_INVALID_ARGUMENT, "{} is NULL", req ? "done" : "req"); });
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

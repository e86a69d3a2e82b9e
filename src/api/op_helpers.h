// Argument checks and the post/wait plumbing shared by the entry points in src/api.
#pragma once

#include <cstddef>
#include <initializer_list>
#include <memory>

#include "algorithms/operation.h"
#include "bagua/bagua.h"
#include "core/comm.h"

struct bagua_request {
  bagua_comm* comm = nullptr;
  std::unique_ptr<bagua::Operation> op;
};

namespace bagua {

// count elements of dtype in bytes (times multiplier); INVALID_ARGUMENT for a bad dtype or an overflow.
size_t checked_bytes(size_t count, bagua_datatype_t dtype, const char* what, size_t multiplier = 1);
void check_redop(bagua_redop_t op);
// dtype must be one of `allowed`; `what` names the call ("quantized allreduce") in the message.
void check_dtype_in(bagua_datatype_t dtype, std::initializer_list<bagua_datatype_t> allowed, const char* what);
// NULL with bytes > 0, or device memory (not supported yet), is refused.
void check_buffer(const void* buf, size_t bytes, const char* name);
void check_rank(const Comm& comm, int rank, const char* what);
bool overlap(const void* a, size_t a_bytes, const void* b, size_t b_bytes);

// Blocking form: post, then wait (inside bagua_group_start/end: post now, complete in group_end).
void run_blocking(bagua_comm* handle, std::unique_ptr<Operation> op);
// Non-blocking form: post and hand the request out.
void post_request(bagua_comm* handle, std::unique_ptr<Operation> op, bagua_request_t* req);

}  // namespace bagua

// The request handle and the post/wait plumbing shared by the entry points in src/api. Argument checks and the
// choice of algorithm are the dispatcher's (algorithms/dispatch.h).
#pragma once

#include <memory>

#include "algorithms/argument_checks.h"
#include "bagua/bagua.h"
#include "core/comm.h"
#include "core/device_proxy.h"
#include "core/operation.h"

struct bagua_request {
  bagua_comm* comm = nullptr;
  std::unique_ptr<bagua::Operation> op;             // host memory: the operation itself
  std::shared_ptr<bagua::DeviceCompletion> device;  // device memory: the proxy owns the operation
};

namespace bagua {

// Blocking form: post, then wait (inside bagua_group_start/end: post now, complete in group_end).
void run_blocking(bagua_comm* handle, std::unique_ptr<Operation> op);
// Whether this thread's open bagua_group_start holds calls of the communicator.
bool open_group_holds(const bagua_comm* handle);
// Whether this thread has a group open (bagua_group_start without its end).
bool in_open_group();
// Non-blocking form: post and hand the request out.
void post_request(bagua_comm* handle, std::unique_ptr<Operation> op, bagua_request_t* req);

}  // namespace bagua

// The request handle and the post/wait plumbing shared by the entry points in src/api. Argument checks and the
// choice of algorithm are the dispatcher's (algorithms/dispatch.h).
#pragma once

#include <memory>
#include <string>

#include "algorithms/argument_checks.h"
#include "bagua/bagua.h"
#include "core/comm.h"
#include "core/device_proxy.h"
#include "core/operation.h"

struct bagua_request {
  bagua_comm* comm = nullptr;
  std::unique_ptr<bagua::Operation> op;             // host memory: the operation itself
  std::shared_ptr<bagua::DeviceCompletion> device;  // device memory: the proxy owns the operation
  // Host memory, its communicator destroyed first: comm and op are gone, and the request ends with this.
  bool detached = false;
  bagua_status_t detached_status = BAGUA_SUCCESS;
  std::string detached_error;
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
// Before the communicator is freed: its host requests that are still out end with their operation's outcome, or
// ABORTED where it had not finished. Their operations go to the communicator, which frees them once its transport
// has let go of their transfers.
void detach_open_requests(bagua_comm* handle);

}  // namespace bagua

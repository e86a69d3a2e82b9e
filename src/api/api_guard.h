// The one guard every extern "C" entry point goes through: no C++ exception crosses the C boundary,
// and every failure leaves a message for bagua_get_last_error.
#pragma once

#include <mutex>
#include <new>
#include <type_traits>
#include <vector>

#include "algorithms/argument_checks.h"
#include "bagua/bagua.h"
#include "base/error.h"
#include "base/logging.h"
#include "core/comm.h"

struct bagua_request;

struct bagua_comm {
  std::unique_ptr<bagua::Comm> impl;
  // Host requests that bagua_wait or bagua_test has not finished yet; bagua_comm_destroy detaches them
  // (api/ops_api.cc, detach_open_requests), so that they stay valid after it.
  std::mutex requests_mutex;
  std::vector<bagua_request*> open_requests;
};

namespace bagua {

void record_error(bagua_comm* comm, const std::string& message);

// body() returns void (success) or the status to return.
template <typename F>
bagua_status_t guarded(bagua_comm* comm, const char* function, F&& body) {
  if (comm != nullptr && comm->impl) set_log_rank(comm->impl->rank());
  try {
    if constexpr (std::is_same_v<decltype(body()), bagua_status_t>) {
      return body();
    } else {
      body();
      return BAGUA_SUCCESS;
    }
  } catch (const Error& e) {
    record_error(comm, fmt::format("{}: {}", function, e.what()));
    return e.status();
  } catch (const std::bad_alloc&) {
    record_error(comm, fmt::format("{}: out of memory", function));
    return BAGUA_ERR_SYSTEM;
  } catch (const std::exception& e) {
    record_error(comm, fmt::format("{}: internal error: {}", function, e.what()));
    return BAGUA_ERR_INTERNAL;
  } catch (...) {
    record_error(comm, fmt::format("{}: internal error (unknown exception)", function));
    return BAGUA_ERR_INTERNAL;
  }
}

// The communicator behind a handle; INVALID_ARGUMENT for NULL. Pointer checks: algorithms/argument_checks.h.
Comm& require_comm(bagua_comm* comm);

}  // namespace bagua

#include "base/error.h"

#include <cstring>

namespace bagua {

void fail_errno(int err, const std::string& what) {
  throw Error(BAGUA_ERR_SYSTEM, fmt::format("{}: {} (errno {})", what, std::strerror(err), err));
}

// One list: the status, its name and its description.
#define BAGUA_STATUS_LIST(X)                                            \
  X(BAGUA_SUCCESS, "success")                                           \
  X(BAGUA_IN_PROGRESS, "operation in progress")                         \
  X(BAGUA_ERR_INVALID_ARGUMENT, "invalid argument")                     \
  X(BAGUA_ERR_INVALID_USAGE, "invalid usage")                           \
  X(BAGUA_ERR_SYSTEM, "system error")                                   \
  X(BAGUA_ERR_INTERNAL, "internal error")                               \
  X(BAGUA_ERR_REMOTE, "remote error: a peer died or the network broke") \
  X(BAGUA_ERR_TIMEOUT, "timed out")                                     \
  X(BAGUA_ERR_NOT_SUPPORTED, "not supported")                           \
  X(BAGUA_ERR_CUDA, "CUDA error")                                       \
  X(BAGUA_ERR_ABORTED, "communicator aborted")

const char* status_name(bagua_status_t status) {
  switch (status) {
#define BAGUA_STATUS_NAME(code, text) \
  case code: return #code;
    BAGUA_STATUS_LIST(BAGUA_STATUS_NAME)
#undef BAGUA_STATUS_NAME
  }
  return "BAGUA_ERR_UNKNOWN";
}

const char* status_text(bagua_status_t status) {
  switch (status) {
#define BAGUA_STATUS_TEXT(code, text) \
  case code: return text;
    BAGUA_STATUS_LIST(BAGUA_STATUS_TEXT)
#undef BAGUA_STATUS_TEXT
  }
  return "unknown status";
}

}  // namespace bagua

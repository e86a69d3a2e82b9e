// Internal error type: thrown inside the library, turned into a bagua_status_t at the C boundary.
#pragma once

#include <stdexcept>
#include <string>

#include <fmt/format.h>

#include "bagua/bagua.h"

namespace bagua {

class Error : public std::runtime_error {
 public:
  Error(bagua_status_t status, std::string message) : std::runtime_error(std::move(message)), status_(status) {}
  bagua_status_t status() const { return status_; }

 private:
  bagua_status_t status_;
};

template <typename... Args>
[[noreturn]] void fail(bagua_status_t status, fmt::format_string<Args...> format, Args&&... args) {
  throw Error(status, fmt::format(format, std::forward<Args>(args)...));
}

// Throws BAGUA_ERR_SYSTEM with strerror(err) appended.
[[noreturn]] void fail_errno(int err, const std::string& what);

const char* status_name(bagua_status_t status);  // "BAGUA_ERR_TIMEOUT"
const char* status_text(bagua_status_t status);  // "timed out"

}  // namespace bagua

#include "algorithms/argument_checks.h"

#include <cstdint>
#include <string>

#include "base/error.h"
#include "core/comm.h"
#include "kernels/device_runtime.h"
#include "kernels/dtype.h"

namespace bagua {

void fail_null(const char* name) { fail(BAGUA_ERR_INVALID_ARGUMENT, "{} is NULL", name); }

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

void CallMemory::add(const void* buf, size_t bytes, const char* name) {
  if (bytes > 0 && buf == nullptr) fail(BAGUA_ERR_INVALID_ARGUMENT, "{} is NULL with a non-zero count", name);
  if (bytes == 0) return;
  int device = -1;
  MemoryType type = device_runtime().memory_type(buf, &device);
  if (type == MemoryType::kHost) device = -1;
  if (first_ != nullptr && device != device_) {
    if (device < 0 || device_ < 0)
      fail(BAGUA_ERR_INVALID_ARGUMENT, "{} is {} memory but {} is {} memory; one call takes host or device buffers",
           first_, device_ < 0 ? "host" : "device", name, device < 0 ? "host" : "device");
    fail(BAGUA_ERR_INVALID_ARGUMENT, "{} is on device {} but {} on device {}", first_, device_, name, device);
  }
  first_ = name;
  device_ = device;
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

}  // namespace bagua

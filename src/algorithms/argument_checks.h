// Argument checks shared by the dispatcher and the relaxations' entry points. Each throws INVALID_ARGUMENT (or
// NOT_SUPPORTED for memory bagua cannot use yet) with a message that names the argument; none has side effects.
#pragma once

#include <cstddef>
#include <initializer_list>

#include "bagua/bagua.h"

namespace bagua {

class Comm;

void fail_null(const char* name);
template <typename T>
void require_pointer(const T* p, const char* name) {
  if (p == nullptr) fail_null(name);
}
// count elements of dtype in bytes (times multiplier); INVALID_ARGUMENT for a bad dtype or an overflow.
size_t checked_bytes(size_t count, bagua_datatype_t dtype, const char* what, size_t multiplier = 1);
void check_redop(bagua_redop_t op);
// dtype must be one of `allowed`; `what` names the call ("quantized allreduce") in the message.
void check_dtype_in(bagua_datatype_t dtype, std::initializer_list<bagua_datatype_t> allowed, const char* what);
// Where a call's buffers live. The memory-kind decision lives here: every buffer a rank uses in one call is
// host memory, or every one is device (or managed) memory of one device; a mix is INVALID_ARGUMENT.
class CallMemory {
 public:
  // NULL with bytes > 0 is refused; an empty buffer counts for nothing.
  void add(const void* buf, size_t bytes, const char* name);
  bool on_device() const { return device_ >= 0; }
  int device() const { return device_; }

 private:
  const char* first_ = nullptr;  // the first buffer counted
  int device_ = -1;
};
void check_rank(const Comm& comm, int rank, const char* what);
bool overlap(const void* a, size_t a_bytes, const void* b, size_t b_bytes);

}  // namespace bagua

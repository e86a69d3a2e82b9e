// bagua_unique_id_t contents: where the rendezvous root listens, the job secret and the group key.
#pragma once

#include <cstdint>

#include "bagua/bagua.h"
#include "bootstrap/socket.h"
#include "bootstrap/wire.h"

namespace bagua {

struct UniqueId {
  SockAddr root;
  Bytes secret;  // 32 random bytes
  uint64_t group_key = 0;

  void encode(bagua_unique_id_t* out) const;
  // Throws INVALID_ARGUMENT when `in` was not produced by bagua_get_unique_id.
  static UniqueId decode(const bagua_unique_id_t& in);
};

// Creates a unique id and starts its rendezvous root in a background thread of this process, as NCCL does.
UniqueId create_unique_id_with_root();

}  // namespace bagua

#include "transport/transport.h"

#include <cstdio>
#include <cstdlib>

namespace bagua {

void Transfer::transfer_destroyed_in_flight(const Transfer& transfer) {
  std::fprintf(stderr,
               "bagua: internal error: a %s of %zu bytes with rank %d (tag %#llx) was destroyed while the transport "
               "still lists it as in flight; aborting\n",
               transfer.is_send ? "send" : "receive", transfer.bytes, transfer.peer,
               static_cast<unsigned long long>(transfer.tag));
  std::abort();
}

}  // namespace bagua

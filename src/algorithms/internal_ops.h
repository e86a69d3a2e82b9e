// Operations the library runs for itself (gossip set-up, lpdec, the async averager): post, wait, release.
#pragma once

#include "algorithms/operation.h"
#include "core/comm.h"

namespace bagua {

// Starts op and waits for it; throws its error. The communicator forgets it either way.
void run_to_completion(Comm& comm, Operation& op);
// A blocking allreduce with the library's algorithm choice (arguments trusted).
void allreduce_now(Comm& comm, const void* sendbuf, void* recvbuf, size_t count, bagua_datatype_t dtype,
                   bagua_redop_t op);

}  // namespace bagua

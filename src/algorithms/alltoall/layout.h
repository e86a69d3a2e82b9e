#pragma once

#include <functional>

#include "algorithms/collective_args.h"
#include "kernels/dtype.h"

namespace bagua {

// Where alltoall / alltoallv put block `peer` (bytes), on the send and receive side.
struct AlltoallLayout {
  std::function<size_t(int)> send_off, send_bytes, recv_off, recv_bytes;
};

inline AlltoallLayout alltoall_layout(const CollectiveArgs& a, int n) {
  size_t es = datatype_size(a.dtype);
  if (a.collective == Collective::kAlltoallv)
    return {[=](int p) { return a.sdispls[p] * es; }, [=](int p) { return a.sendcounts[p] * es; },
            [=](int p) { return a.rdispls[p] * es; }, [=](int p) { return a.recvcounts[p] * es; }};
  size_t block = a.count * es;
  (void)n;
  return {[=](int p) { return p * block; }, [=](int) { return block; }, [=](int p) { return p * block; },
          [=](int) { return block; }};
}

}  // namespace bagua

// Shared by the alltoall(v) algorithms: where each peer's block sits in sendbuf and recvbuf.
#pragma once

#include <functional>

#include "algorithms/collective_args.h"
#include "algorithms/cost_model.h"
#include "algorithms/schedule.h"
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

// Blocks below 64 KiB never take UCX's rendezvous handshake (its default above 8 KiB), which waits on the peer's
// progress and cost more than the copy it saves (3 ranks on the 2-core VM: 75 us at 64 KiB total against 73 us at
// 256 KiB): they go eagerly, or by single copy within a host from its threshold (2 ranks, 32 KiB blocks: 6.1-8.0
// against 8.3-9.9 us eagerly). Only while a call's eager blocks stay within 1 MiB per rank: a receiver that has not
// posted yet buffers them all.
inline SendMode alltoall_send_mode(size_t bytes, int nranks) {
  return bytes < (64 << 10) && bytes * static_cast<size_t>(nranks - 1) <= (1 << 20) ? SendMode::kEagerOrSingleCopy
                                                                                    : SendMode::kDefault;
}

// Modelled wait of a round of alltoall messages where the ranks of one host outnumber their cores (the
// shared-segment algorithm it competes with needs one host).
inline double alltoall_shared_cores_us(const CostTerms& t) {
  return t.H <= 1 && t.model.ranks_share_cores ? t.model.shared_cores_round_us : 0.0;
}

// The blocks of a call.
struct AlltoallBlocks {
  AlltoallLayout layout;
  const uint8_t* src;
  uint8_t* out;
};
inline AlltoallBlocks alltoall_start(const CollectiveArgs& a, int n) {
  return {alltoall_layout(a, n), static_cast<const uint8_t*>(a.sendbuf), static_cast<uint8_t*>(a.recvbuf)};
}

// This rank's own block, copied while the first round's messages are in flight (none of them touches it: alltoall
// has no in-place form), or in the prologue on one rank. Copied before posting, it delayed every send (2 ranks,
// 32 KiB in all: docs/algorithms.md).
inline void alltoall_copy_own_block(Schedule& s, const AlltoallBlocks& b, int r) {
  LocalStep copy = copy_step(b.out + b.layout.recv_off(r), b.src + b.layout.send_off(r), b.layout.send_bytes(r));
  if (s.rounds().empty())
    s.prologue().push_back(std::move(copy));
  else
    s.rounds().front().during.push_back(std::move(copy));
}

}  // namespace bagua

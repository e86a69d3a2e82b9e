// Alltoall(v) in one round: every block to its peer at once.
#include "algorithms/alltoall/layout.h"
#include "algorithms/registry.h"
#include "algorithms/schedule.h"
#include "kernels/dtype.h"

namespace bagua {

namespace {

std::unique_ptr<Schedule> alltoall_direct(const CollectiveArgs& a, const ScheduleContext& ctx) {
  auto s = std::make_unique<Schedule>(ctx);
  const int n = ctx.nranks, r = ctx.rank;
  AlltoallBlocks blocks = alltoall_start(a, n);
  auto& [l, src, out] = blocks;
  if (n > 1) {
    Round& round = s->round();
    for (int peer = 0; peer < n; ++peer) {
      if (peer == r) continue;
      round.recvs.push_back({peer, out + l.recv_off(peer), l.recv_bytes(peer)});
      round.sends.push_back(
          {peer, src + l.send_off(peer), l.send_bytes(peer), alltoall_send_mode(l.send_bytes(peer), n)});
    }
  }
  alltoall_copy_own_block(*s, blocks, r);
  return s;
}

// Every block at once congests links between hosts (the 1.2); within a host single-copy reads share memory
// bandwidth either way, and direct was as fast as pairwise or faster at every size (3 ranks, 1-64 MiB).
double cost(const CostTerms& t) {
  return t.alpha + (t.n - 1) * t.delta + alltoall_shared_cores_us(t) + t.frac * t.m * (t.H > 1 ? 1.2 : 1.0) * t.beta;
}

}  // namespace

extern const AlgorithmEntry kAlltoallDirect;
const AlgorithmEntry kAlltoallDirect{Collective::kAlltoall, "direct", nullptr, cost, run_schedule<alltoall_direct>};

// alltoallv runs the same schedule (alltoall_layout reads its counts and displacements).
extern const AlgorithmEntry kAlltoallvDirect;
const AlgorithmEntry kAlltoallvDirect{Collective::kAlltoallv, "direct", nullptr, cost, run_schedule<alltoall_direct>};

}  // namespace bagua

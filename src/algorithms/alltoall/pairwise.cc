// Alltoall(v) in n-1 rounds, one peer each (rank + k sends to rank - k).
#include "algorithms/alltoall/layout.h"
#include "algorithms/registry.h"
#include "algorithms/schedule.h"
#include "kernels/dtype.h"

namespace bagua {

namespace {

std::unique_ptr<Schedule> alltoall_pairwise(const CollectiveArgs& a, const ScheduleContext& ctx) {
  auto s = std::make_unique<Schedule>(ctx);
  const int n = ctx.nranks, r = ctx.rank;
  AlltoallBlocks blocks = alltoall_start(a, n);
  auto& [l, src, out] = blocks;
  for (int k = 1; k < n; ++k) {
    int to = (r + k) % n, from = (r - k + n) % n;
    Round& round = s->round();
    round.recvs.push_back({from, out + l.recv_off(from), l.recv_bytes(from)});
    round.sends.push_back({to, src + l.send_off(to), l.send_bytes(to), alltoall_send_mode(l.send_bytes(to), n)});
  }
  alltoall_copy_own_block(*s, blocks, r);
  return s;
}

double cost(const CostTerms& t) { return (t.n - 1) * (t.alpha + alltoall_shared_cores_us(t)) + t.frac * t.m * t.beta; }

}  // namespace

extern const AlgorithmEntry kAlltoallPairwise;
const AlgorithmEntry kAlltoallPairwise{Collective::kAlltoall, "pairwise", nullptr, cost,
                                       run_schedule<alltoall_pairwise>};

// alltoallv runs the same schedule (alltoall_layout reads its counts and displacements).
extern const AlgorithmEntry kAlltoallvPairwise;
const AlgorithmEntry kAlltoallvPairwise{Collective::kAlltoallv, "pairwise", nullptr, cost,
                                        run_schedule<alltoall_pairwise>};

}  // namespace bagua

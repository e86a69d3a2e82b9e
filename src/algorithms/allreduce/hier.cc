// Hierarchical "rail" allreduce (hierarchical/groups.h): ring reduce-scatter inside each host, ring allreduce
// of each block across hosts among the ranks with the same local index, ring allgather inside each host.
#include "algorithms/hierarchical/groups.h"
#include "algorithms/patterns/ring.h"
#include "algorithms/registry.h"
#include "algorithms/schedule.h"
#include "kernels/dtype.h"

namespace bagua {

namespace {

std::unique_ptr<Schedule> allreduce_hierarchical(const CollectiveArgs& a, const ScheduleContext& ctx) {
  auto s = std::make_unique<Schedule>(ctx);
  Place me = place_of(ctx, ctx.rank);
  const std::vector<int>& host = ctx.hosts()[me.host];
  const int L = static_cast<int>(host.size()), H = static_cast<int>(ctx.hosts().size());
  auto* out = static_cast<uint8_t*>(a.recvbuf);
  const auto* in = static_cast<const uint8_t*>(a.sendbuf);
  BlockLayout blocks = BlockLayout::balanced(a.count, L, a.dtype);
  // 1. Reduce-scatter inside the host: local rank l owns block l.
  group_reduce_scatter(*s, host, me.local, blocks, in, out + blocks.offset_bytes(me.local), L - 1);
  // 2. Allreduce of block l across hosts, among the ranks with local index l (a rail).
  std::vector<int> rail;
  for (const auto& h : ctx.hosts()) rail.push_back(h[me.local]);
  const size_t rail_start = s->rounds().size();
  // Pipelined: on the test bed (2x2, 1 Gbit/s) it took the rail form from 246 to 185 ms at 16 MiB, while
  // it slowed the leader form (168 to 232 ms), which therefore stays unpipelined.
  group_allreduce(*s, rail, me.host, out + blocks.offset_bytes(me.local), blocks.count(me.local), a, true);
  // Rails with one element less may take fewer rounds: pad all to the largest block's (block 0's).
  pad_to(*s, rail_start, group_allreduce_rounds(blocks.count(0), H, a.dtype, true));
  // 3. Allgather inside the host.
  group_allgather(*s, host, me.local, blocks, out, L - 1);
  return s;
}

double cost(const CostTerms& t) {  // The rail runs L flows over each host link at once. With its pieces sent eagerly
                                   // they fill the link as one
  // flow would (test bed, 2x2, 1 Gbit/s); by rendezvous they had taken ~1.6x longer.
  return t.intra_rs_ag() + (t.L - 1) / t.L * t.m * t.gamma + 2 * (t.H - 1) * t.alpha + t.inter();
}

}  // namespace

extern const AlgorithmEntry kAllreduceHier;
const AlgorithmEntry kAllreduceHier{Collective::kAllreduce, "hier",
                                    [](int, const HostLayout& hosts) {
                                      if (hosts.size() < 2) return false;
                                      for (const auto& h : hosts)  // the rail needs the same ranks on every host
                                        if (h.size() != hosts.front().size()) return false;
                                      return true;
                                    },
                                    cost, run_schedule<allreduce_hierarchical>};

}  // namespace bagua

// Hierarchical allreduce through one leader per host (hierarchical/groups.h): reduce to the leader, ring
// allreduce among leaders, broadcast inside each host. Any layout.
#include "algorithms/hierarchical/groups.h"
#include "algorithms/patterns/ring.h"
#include "algorithms/registry.h"
#include "algorithms/schedule.h"
#include "kernels/dtype.h"

namespace bagua {

namespace {

std::unique_ptr<Schedule> allreduce_hierarchical_leader(const CollectiveArgs& a, const ScheduleContext& ctx) {
  auto s = std::make_unique<Schedule>(ctx);
  Place me = place_of(ctx, ctx.rank);
  const std::vector<int>& host = ctx.hosts()[me.host];
  std::vector<int> leader_of = leaders(ctx, -1);
  const int leader = leader_of[me.host];
  size_t bytes = a.count * datatype_size(a.dtype);
  auto* out = static_cast<uint8_t*>(a.recvbuf);
  // 1. Reduce to the leader: one round of direct sends, combined in local-rank order.
  reduce_to_leader(*s, ctx, leader, host, a.sendbuf, out, a.count, bytes);
  // 2. Ring allreduce among the leaders (the others wait in empty rounds).
  const int H = static_cast<int>(ctx.hosts().size());
  if (ctx.rank == leader) {
    group_allreduce(*s, leader_of, me.host, out, a.count, a, false);
  } else {
    pad_to(*s, s->rounds().size(), group_allreduce_rounds(a.count, H, a.dtype, false));
  }
  // 3. Broadcast inside each host.
  broadcast_from_leader(*s, ctx, leader, host, out, bytes);
  return s;
}

double cost(const CostTerms& t) {
  return 2 * t.alpha + 2 * (t.L - 1) * t.m * t.beta_intra + (t.L - 1) * t.m * t.gamma + 2 * (t.H - 1) * t.alpha +
         t.inter();
}

}  // namespace

extern const AlgorithmEntry kAllreduceHierLeader;
const AlgorithmEntry kAllreduceHierLeader{Collective::kAllreduce, "hier_leader", on_several_hosts, cost,
                                          run_schedule<allreduce_hierarchical_leader>};

}  // namespace bagua

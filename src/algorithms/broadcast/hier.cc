// Hierarchical broadcast (hierarchical/groups.h): binomial tree among host leaders (the root leads its host),
// then each leader broadcasts inside its host.
#include "algorithms/hierarchical/groups.h"
#include "algorithms/patterns/binomial.h"
#include "algorithms/registry.h"
#include "algorithms/schedule.h"
#include "kernels/dtype.h"

namespace bagua {

namespace {

std::unique_ptr<Schedule> broadcast_hierarchical(const CollectiveArgs& a, const ScheduleContext& ctx) {
  auto s = std::make_unique<Schedule>(ctx);
  Place me = place_of(ctx, ctx.rank);
  const std::vector<int>& host = ctx.hosts()[me.host];
  std::vector<int> leader_of = leaders(ctx, a.root);
  const int leader = leader_of[me.host];
  size_t bytes = a.count * datatype_size(a.dtype);
  auto* buf = static_cast<uint8_t*>(a.recvbuf);
  if (ctx.rank == a.root) s->prologue().push_back(copy_step(buf, a.sendbuf, bytes));
  const int H = static_cast<int>(ctx.hosts().size());
  int root_host = place_of(ctx, a.root).host;
  int vr = binomial::relative(me.host, root_host, H);
  for (int i = 0; i < binomial::ceil_log2(H); ++i) {
    int mask = binomial::broadcast_mask(i, H);
    Round& round = s->round();
    if (ctx.rank != leader) continue;
    if (int from = binomial::receive_from(vr, mask); from >= 0)
      round.recvs.push_back({leader_of[binomial::absolute(from, root_host, H)], buf, bytes});
    if (int to = binomial::send_to(vr, mask, H); to >= 0)
      round.sends.push_back({leader_of[binomial::absolute(to, root_host, H)], buf, bytes});
  }
  broadcast_from_leader(*s, ctx, leader, host, buf, bytes);
  return s;
}

double cost(const CostTerms& t) { return t.leader_tree(); }

}  // namespace

extern const AlgorithmEntry kBroadcastHier;
const AlgorithmEntry kBroadcastHier{Collective::kBroadcast, "hier", on_several_hosts, cost,
                                    run_schedule<broadcast_hierarchical>};

}  // namespace bagua

// Hierarchical reduce (hierarchical/groups.h): each host reduces to its leader (the root leads its host), then
// a binomial tree among leaders.
#include "algorithms/hierarchical/groups.h"
#include "algorithms/patterns/binomial.h"
#include "algorithms/registry.h"
#include "algorithms/schedule.h"
#include "kernels/dtype.h"

namespace bagua {

namespace {

std::unique_ptr<Schedule> reduce_hierarchical(const CollectiveArgs& a, const ScheduleContext& ctx) {
  auto s = std::make_unique<Schedule>(ctx);
  Place me = place_of(ctx, ctx.rank);
  const std::vector<int>& host = ctx.hosts()[me.host];
  std::vector<int> leader_of = leaders(ctx, a.root);
  const int leader = leader_of[me.host];
  size_t bytes = a.count * datatype_size(a.dtype);
  const int H = static_cast<int>(ctx.hosts().size());
  // Leaders accumulate in recvbuf (the root) or scratch.
  uint8_t* acc =
      ctx.rank == a.root ? static_cast<uint8_t*>(a.recvbuf) : (ctx.rank == leader ? s->scratch(bytes) : nullptr);
  reduce_to_leader(*s, ctx, leader, host, a.sendbuf, acc, a.count, bytes);
  // Binomial reduce among leaders toward the root's host.
  int root_host = place_of(ctx, a.root).host;
  int vr = binomial::relative(me.host, root_host, H);
  uint8_t* tmp = ctx.rank == leader ? s->scratch(bytes) : nullptr;
  for (int i = binomial::ceil_log2(H) - 1; i >= 0; --i) {
    int mask = binomial::broadcast_mask(i, H);
    Round& round = s->round();
    if (ctx.rank != leader) continue;
    if (int child = binomial::send_to(vr, mask, H); child >= 0) {
      round.recvs.push_back({leader_of[binomial::absolute(child, root_host, H)], tmp, bytes});
      round.after.push_back(reduce_step(acc, acc, tmp, a.count));
    }
    if (int parent = binomial::receive_from(vr, mask); parent >= 0)
      round.sends.push_back({leader_of[binomial::absolute(parent, root_host, H)], acc, bytes});
  }
  if (ctx.rank == a.root && a.op == BAGUA_AVG) s->then(divide_step(acc, a.count));
  return s;
}

double cost(const CostTerms& t) { return t.leader_tree(); }

}  // namespace

extern const AlgorithmEntry kReduceHier;
const AlgorithmEntry kReduceHier{Collective::kReduce, "hier", on_several_hosts, cost,
                                 run_schedule<reduce_hierarchical>};

}  // namespace bagua

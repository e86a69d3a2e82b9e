// Tree allreduce: binomial reduce to rank 0, then binomial broadcast from it (binomial_trees.h).
#include "algorithms/binomial_trees.h"
#include "algorithms/registry.h"
#include "algorithms/schedule.h"
#include "kernels/dtype.h"

namespace bagua {

namespace {

// Binomial reduce to rank 0, then binomial broadcast from it: 2 log2(n) rounds of the whole vector.
std::unique_ptr<Schedule> allreduce_tree(const CollectiveArgs& a, const ScheduleContext& ctx) {
  CollectiveArgs reduce_args = a;
  reduce_args.root = 0;
  reduce_args.op = a.op == BAGUA_AVG ? BAGUA_AVG : a.op;
  std::unique_ptr<Schedule> s = reduce_tree(reduce_args, ctx);  // rank 0 ends with the result in recvbuf
  // Everyone else accumulated in scratch; the broadcast delivers the result into recvbuf.
  CollectiveArgs bcast_args = a;
  bcast_args.root = 0;
  bcast_args.sendbuf = a.recvbuf;
  std::unique_ptr<Schedule> b = broadcast_tree(bcast_args, ctx);
  for (Round& round : b->rounds()) s->rounds().push_back(std::move(round));
  return s;
}

double cost(const CostTerms& t) { return 2 * t.levels * (t.round(t.m) + t.m * t.beta) + t.levels * t.m * t.gamma; }

}  // namespace

extern const AlgorithmEntry kAllreduceTree;
const AlgorithmEntry kAllreduceTree{Collective::kAllreduce, "tree", nullptr, cost, run_schedule<allreduce_tree>};

}  // namespace bagua

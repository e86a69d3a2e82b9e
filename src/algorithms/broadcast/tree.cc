// Broadcast down a binomial tree rooted at the root.
#include "algorithms/binomial_trees.h"
#include "algorithms/patterns/binomial.h"
#include "algorithms/registry.h"
#include "algorithms/schedule.h"
#include "kernels/dtype.h"

namespace bagua {

std::unique_ptr<Schedule> broadcast_tree(const CollectiveArgs& a, const ScheduleContext& ctx) {
  auto s = std::make_unique<Schedule>(ctx);
  const int n = ctx.nranks;
  size_t bytes = a.count * datatype_size(a.dtype);
  auto* buf = static_cast<uint8_t*>(a.recvbuf);
  if (ctx.rank == a.root) s->prologue().push_back(copy_step(buf, a.sendbuf, bytes));
  int vr = binomial::relative(ctx.rank, a.root, n);
  for (int i = 0; i < binomial::ceil_log2(n); ++i) {
    int mask = binomial::broadcast_mask(i, n);
    Round& round = s->round();
    if (int from = binomial::receive_from(vr, mask); from >= 0)
      round.recvs.push_back({binomial::absolute(from, a.root, n), buf, bytes});
    if (int to = binomial::send_to(vr, mask, n); to >= 0)
      round.sends.push_back({binomial::absolute(to, a.root, n), buf, bytes});
  }
  return s;
}

namespace {

double cost(const CostTerms& t) { return t.levels * (t.alpha + t.m * t.beta); }

}  // namespace

extern const AlgorithmEntry kBroadcastTree;
const AlgorithmEntry kBroadcastTree{Collective::kBroadcast, "tree", nullptr, cost, run_schedule<broadcast_tree>};

}  // namespace bagua

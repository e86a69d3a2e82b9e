// Reduce up a binomial tree to the root.
#include "algorithms/binomial_trees.h"
#include "algorithms/patterns/binomial.h"
#include "algorithms/registry.h"
#include "algorithms/schedule.h"
#include "kernels/dtype.h"

namespace bagua {

std::unique_ptr<Schedule> reduce_tree(const CollectiveArgs& a, const ScheduleContext& ctx) {
  auto s = std::make_unique<Schedule>(ctx);
  const int n = ctx.nranks;
  size_t bytes = a.count * datatype_size(a.dtype);
  // The root accumulates in recvbuf, the others in scratch (their recvbuf may be NULL).
  auto* acc = ctx.rank == a.root ? static_cast<uint8_t*>(a.recvbuf) : s->scratch(bytes);
  s->prologue().push_back(copy_step(acc, a.sendbuf, bytes));
  uint8_t* tmp = n > 1 ? s->scratch(bytes) : nullptr;
  int vr = binomial::relative(ctx.rank, a.root, n);
  const int levels = binomial::ceil_log2(n);
  for (int i = levels - 1; i >= 0; --i) {  // broadcast rounds, backwards
    int mask = binomial::broadcast_mask(i, n);
    Round& round = s->round();
    if (int child = binomial::send_to(vr, mask, n); child >= 0) {
      round.recvs.push_back({binomial::absolute(child, a.root, n), tmp, bytes});
      round.after.push_back(reduce_step(acc, acc, tmp, a.count));  // our (lower relative rank) data first
    }
    if (int parent = binomial::receive_from(vr, mask); parent >= 0)
      round.sends.push_back({binomial::absolute(parent, a.root, n), acc, bytes});
  }
  if (ctx.rank == a.root && a.op == BAGUA_AVG) {
    s->then(divide_step(acc, a.count));
  }
  return s;
}

namespace {

double cost(const CostTerms& t) { return t.levels * (t.alpha + t.m * t.beta + t.m * t.gamma); }

}  // namespace

extern const AlgorithmEntry kReduceTree;
const AlgorithmEntry kReduceTree{Collective::kReduce, "tree", nullptr, cost, run_schedule<reduce_tree>};

}  // namespace bagua

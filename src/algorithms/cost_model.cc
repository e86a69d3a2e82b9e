#include "algorithms/cost_model.h"

#include <algorithm>
#include <cmath>

#include "algorithms/patterns/binomial.h"
#include "algorithms/patterns/recursive.h"

namespace bagua {

namespace {
size_t fullest_host(const HostLayout& hosts) {
  size_t most = 1;
  for (const auto& h : hosts) most = std::max(most, h.size());
  return most;
}
}  // namespace

double CostModel::SharedCopyFactor::at(double block) const {
  if (block <= small_block || large_block <= small_block) return at_small;
  if (block >= large_block) return at_large;
  const double t = std::log2(block / small_block) / std::log2(large_block / small_block);
  return at_small + t * (at_large - at_small);
}

CostTerms::CostTerms(const CostModel& c, size_t bytes, int nranks, const HostLayout& hosts)
    : model(c),
      m(static_cast<double>(bytes)),
      n(nranks),
      H(std::max<int>(1, static_cast<int>(hosts.size()))),
      L(static_cast<double>(fullest_host(hosts))),
      alpha(c.latency_us),
      delta(c.per_message_us),
      beta_intra(1e-3 / c.link_gbps),
      beta_inter(1e-3 / c.inter_host_gbps),
      beta(H > 1 ? beta_inter : beta_intra),
      gamma(1e-3 / c.reduce_gbps),
      levels(binomial::ceil_log2(nranks)),
      p(recursive::core_size(nranks)),
      lp(std::log2(static_cast<double>(p))),
      frac(nranks > 1 ? static_cast<double>(nranks - 1) / nranks : 0.0),
      fold_cost((recursive::folded(nranks) > 0 ? 1.0 : 0.0) * (2 * round(m) + 2 * m * beta + m * gamma)) {}

double CostTerms::round(double msg) const {
  return alpha + (msg > static_cast<double>(model.eager_limit) ? model.rendezvous_us : 0.0) +
         (msg >= static_cast<double>(model.single_copy_limit) ? model.single_copy_us : 0.0);
}

double CostTerms::leader_tree() const {
  return 2 * alpha + (L - 1) * m * beta_intra + std::ceil(std::log2(H)) * (alpha + m * beta_inter);
}

}  // namespace bagua

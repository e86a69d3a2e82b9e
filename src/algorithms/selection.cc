#include "algorithms/selection.h"

#include <cmath>
#include <limits>
#include <sstream>

#include "algorithms/patterns/binomial.h"
#include "algorithms/patterns/recursive.h"
#include "core/error.h"

namespace bagua {

namespace {

std::vector<std::string> split(const std::string& text, char sep) {
  std::vector<std::string> parts;
  std::stringstream in(text);
  std::string part;
  while (std::getline(in, part, sep)) parts.push_back(part);
  return parts;
}

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t");
  size_t e = s.find_last_not_of(" \t");
  return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
}

}  // namespace

bool parse_byte_size(const std::string& text, size_t* out) {
  if (text.empty()) return false;
  char* end = nullptr;
  double value = std::strtod(text.c_str(), &end);
  std::string suffix = end;
  double scale = 1;
  if (suffix == "K" || suffix == "k")
    scale = 1024.0;
  else if (suffix == "M" || suffix == "m")
    scale = 1024.0 * 1024;
  else if (suffix == "G" || suffix == "g")
    scale = 1024.0 * 1024 * 1024;
  else if (!suffix.empty())
    return false;
  if (end == text.c_str() || value < 0 || !std::isfinite(value)) return false;
  *out = static_cast<size_t>(value * scale);
  return true;
}

AlgorithmSelector::AlgorithmSelector(const std::string& spec, double inter_host_gbps) {
  model_.inter_host_gbps = inter_host_gbps;
  auto bad = [&](const std::string& why) {
    fail(BAGUA_ERR_INVALID_USAGE,
         "BAGUA_ALGO='{}': {} (expected e.g. 'allreduce:ring' or 'allreduce:0-64K:rd,64K-:ring')", spec, why);
  };
  for (const std::string& raw_rule : split(spec, ';')) {
    std::string rule = trim(raw_rule);
    if (rule.empty()) continue;
    size_t colon = rule.find(':');
    if (colon == std::string::npos) bad("rule '" + rule + "' has no ':'");
    Collective c;
    if (!parse_collective(trim(rule.substr(0, colon)), &c)) bad("unknown collective '" + rule.substr(0, colon) + "'");
    for (const std::string& raw_part : split(rule.substr(colon + 1), ',')) {
      std::string part = trim(raw_part);
      size_t lo = 0, hi = std::numeric_limits<size_t>::max();
      std::string algo_text = part;
      size_t range_colon = part.find(':');
      if (range_colon != std::string::npos) {
        std::string range = part.substr(0, range_colon);
        algo_text = part.substr(range_colon + 1);
        size_t dash = range.find('-');
        if (dash == std::string::npos) bad("range '" + range + "' has no '-'");
        std::string lo_text = trim(range.substr(0, dash)), hi_text = trim(range.substr(dash + 1));
        if (!lo_text.empty() && !parse_byte_size(lo_text, &lo)) bad("bad size '" + lo_text + "'");
        if (!hi_text.empty() && !parse_byte_size(hi_text, &hi)) bad("bad size '" + hi_text + "'");
        if (lo >= hi) bad("empty range '" + range + "'");
      }
      Algorithm a;
      if (!parse_algorithm(trim(algo_text), &a) || a == Algorithm::kAuto) bad("unknown algorithm '" + algo_text + "'");
      bool usable_somewhere = false;
      HostLayout two_hosts = {{0, 1}, {2, 3}};
      for (int n : {2, 3, 4, 8}) usable_somewhere |= algorithm_supports(c, a, n);
      usable_somewhere |= algorithm_supports(c, a, 4, two_hosts);
      if (!usable_somewhere) bad(std::string(algorithm_name(a)) + " is not an algorithm for " + collective_name(c));
      rules_.push_back({c, lo, hi, a});
    }
  }
}

Algorithm AlgorithmSelector::choose(Collective c, size_t bytes, int nranks, const HostLayout& hosts) const {
  for (const Rule& rule : rules_)
    if (rule.collective == c && bytes >= rule.lo && bytes < rule.hi && usable(c, rule.algorithm, nranks, hosts))
      return rule.algorithm;
  return model_choice(c, bytes, nranks, hosts);
}

Algorithm AlgorithmSelector::model_choice(Collective c, size_t bytes, int nranks, const HostLayout& hosts) const {
  Algorithm best = Algorithm::kAuto;
  double best_cost = std::numeric_limits<double>::infinity();
  for (int i = 1; i < static_cast<int>(Algorithm::kCount); ++i) {
    auto a = static_cast<Algorithm>(i);
    if (!usable(c, a, nranks, hosts)) continue;
    double cost = model_.cost_us(c, a, bytes, nranks, hosts);
    if (cost < best_cost) {  // ties keep the earlier algorithm: deterministic
      best_cost = cost;
      best = a;
    }
  }
  return best;
}

bool AlgorithmSelector::usable(Collective c, Algorithm a, int nranks, const HostLayout& hosts) const {
  if (c == Collective::kAllreduce && a == Algorithm::kDirect && !cross_memory_) return false;
  return algorithm_supports(c, a, nranks, hosts);
}

double CostModel::cost_us(Collective c, Algorithm a, size_t bytes, int n, const HostLayout& hosts) const {
  const double m = static_cast<double>(bytes);
  const double alpha = latency_us, delta = per_message_us;
  const int H = std::max<int>(1, static_cast<int>(hosts.size()));
  size_t most_local = 1;
  for (const auto& h : hosts) most_local = std::max(most_local, h.size());
  const double L = static_cast<double>(most_local);
  const double beta_intra = 1e-3 / link_gbps;
  const double beta_inter = 1e-3 / inter_host_gbps;
  // Flat algorithms on several hosts are bound by the links between them.
  const double beta = H > 1 ? beta_inter : beta_intra;  // us per byte
  const double gamma = 1e-3 / reduce_gbps;              // us per byte reduced
  const double levels = binomial::ceil_log2(n);
  const int p = recursive::core_size(n);
  const double fold = recursive::folded(n) > 0 ? 1.0 : 0.0;
  const double lp = std::log2(static_cast<double>(p));
  const double frac = n > 1 ? static_cast<double>(n - 1) / n : 0.0;
  if (n == 1) return 0;
  if (a == Algorithm::kHierarchical || a == Algorithm::kHierarchicalLeader) {
    const double inter = 2.0 * (H - 1) / H * m * beta_inter;  // what each host sends to the others
    const double intra_rs_ag = 2 * (L - 1) * alpha + 2 * (L - 1) / L * m * beta_intra;
    switch (c) {
      case Collective::kAllreduce:
        // The rail runs L flows over each host link at once. With its pieces sent eagerly they fill the link
        // as one flow would (test bed, 2x2, 1 Gbit/s); by rendezvous they had taken ~1.6x longer.
        if (a == Algorithm::kHierarchical) return intra_rs_ag + (L - 1) / L * m * gamma + 2 * (H - 1) * alpha + inter;
        return 2 * alpha + 2 * (L - 1) * m * beta_intra + (L - 1) * m * gamma + 2 * (H - 1) * alpha + inter;
      case Collective::kReduce:
      case Collective::kBroadcast:
        return 2 * alpha + (L - 1) * m * beta_intra + std::ceil(std::log2(H)) * (alpha + m * beta_inter);
      case Collective::kAllgather: return 3 * alpha + m * beta_intra + (H - 1.0) / H * m * beta_inter;
      default: return std::numeric_limits<double>::infinity();
    }
  }
  // Latency of one round whose messages are `msg` bytes.
  auto round = [&](double msg) {
    return alpha + (msg > static_cast<double>(eager_limit) ? rendezvous_us : 0.0) +
           (msg >= static_cast<double>(single_copy_limit) ? single_copy_us : 0.0);
  };
  const double fold_cost = fold * (2 * round(m) + 2 * m * beta + m * gamma);
  switch (c) {
    case Collective::kAllreduce:
      switch (a) {
        case Algorithm::kRing:
          return 2 * (n - 1) * round(std::min(m / n, 512.0 * 1024)) + 2 * frac * m * beta + frac * m * gamma;
        case Algorithm::kRecursiveDoubling: return lp * (round(m) + m * beta + m * gamma) + fold_cost;
        case Algorithm::kRabenseifner:
          return 2 * lp * round(m / 2) + 2 * (p - 1.0) / p * m * beta + (p - 1.0) / p * m * gamma + fold_cost;
        case Algorithm::kTree: return 2 * levels * (round(m) + m * beta) + levels * m * gamma;
        case Algorithm::kDirect: {  // hello and done rounds; per segment one read and one write per peer
          const double segments = std::max(1.0, std::ceil(m / n / (256.0 * 1024)));
          return 2 * alpha + 2 * (n - 1) * delta + 2 * segments * (n - 1) * cross_memory_us +
                 2 * frac * m * beta * direct_move_factor + frac * m * gamma;
        }
        default: break;
      }
      break;
    case Collective::kReduceScatter:
      if (a == Algorithm::kRing) return (n - 1) * (alpha + m / n * (beta + gamma));
      if (a == Algorithm::kDirect) return alpha + (n - 1) * delta + frac * m * (1.2 * beta + gamma);
      break;
    case Collective::kAllgather:
      if (a == Algorithm::kRing) return (n - 1) * (alpha + m / n * beta);
      if (a == Algorithm::kRecursiveDoubling) return levels * alpha + frac * m * beta;
      if (a == Algorithm::kDirect) return alpha + (n - 1) * delta + frac * m * 1.2 * beta;
      break;
    case Collective::kBroadcast:
      if (a == Algorithm::kTree) return levels * (alpha + m * beta);
      if (a == Algorithm::kScatterAllgather) return (levels + n - 1) * alpha + 2 * frac * m * beta;
      break;
    case Collective::kReduce:
      if (a == Algorithm::kTree) return levels * (alpha + m * beta + m * gamma);
      if (a == Algorithm::kReduceScatterGather) return n * alpha + (n - 1) * delta + frac * m * (2 * beta + gamma);
      break;
    case Collective::kAlltoall:
    case Collective::kAlltoallv:
      if (a == Algorithm::kDirect) return alpha + (n - 1) * delta + frac * m * 1.2 * beta;
      if (a == Algorithm::kPairwise) return (n - 1) * alpha + frac * m * beta;
      break;
    case Collective::kGather:
    case Collective::kScatter: return alpha + (n - 1) * delta + frac * m * beta;
    case Collective::kBarrier: return levels * alpha;
    case Collective::kCount: break;
  }
  return std::numeric_limits<double>::infinity();
}

}  // namespace bagua

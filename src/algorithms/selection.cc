#include "algorithms/selection.h"

#include <cmath>
#include <cstdio>
#include <limits>
#include <sstream>

#include "base/error.h"

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
  // A size past what size_t holds is malformed too (converting it would be undefined; found by fuzz_algo_spec).
  if (value * scale >= 18446744073709551616.0) return false;
  *out = static_cast<size_t>(value * scale);
  return true;
}

AlgorithmSelector::AlgorithmSelector(const std::string& spec, double inter_host_gbps, bool cross_memory)
    : cross_memory_(cross_memory) {
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
      Algorithm a = find_algorithm(c, trim(algo_text));
      if (a == nullptr) {
        std::string known;
        for (Algorithm k : algorithms_of(c)) known += std::string(known.empty() ? "" : ", ") + k->name;
        bad("'" + trim(algo_text) + "' is not an algorithm for " + collective_name(c) + " (" + known + ")");
      }
      rules_.push_back({c, lo, hi, a});
    }
  }
}

std::string AlgorithmSelector::explain(Collective c, size_t bytes, int nranks, const HostLayout& hosts) const {
  for (const Rule& rule : rules_)
    if (rule.collective == c && bytes >= rule.lo && bytes < rule.hi && usable(rule.algorithm, nranks, hosts))
      return std::string("BAGUA_ALGO rule for ") + rule.algorithm->name;
  const CostTerms terms(model_, bytes, nranks, hosts);
  std::string out = "model:";
  for (Algorithm a : algorithms_of(c)) {
    if (!usable(a, nranks, hosts)) continue;
    char cost[32];
    std::snprintf(cost, sizeof cost, "%.1f", nranks == 1 ? 0.0 : a->cost_us(terms));
    out += std::string(" ") + a->name + " " + cost + " us,";
  }
  if (out.back() == ',') out.pop_back();
  return out;
}

Algorithm AlgorithmSelector::choose(Collective c, size_t bytes, int nranks, const HostLayout& hosts) const {
  for (const Rule& rule : rules_)
    if (rule.collective == c && bytes >= rule.lo && bytes < rule.hi && usable(rule.algorithm, nranks, hosts))
      return rule.algorithm;
  return model_choice(c, bytes, nranks, hosts);
}

Algorithm AlgorithmSelector::model_choice(Collective c, size_t bytes, int nranks, const HostLayout& hosts) const {
  Algorithm best = nullptr;
  double best_cost = std::numeric_limits<double>::infinity();
  const CostTerms terms(model_, bytes, nranks, hosts);
  for (Algorithm a : algorithms_of(c)) {
    if (!usable(a, nranks, hosts)) continue;
    double cost = nranks == 1 ? 0.0 : a->cost_us(terms);
    if (best == nullptr || cost < best_cost) {  // ties keep the earlier row: deterministic
      best_cost = cost;
      best = a;
    }
  }
  if (best == nullptr) fail(BAGUA_ERR_INTERNAL, "no {} algorithm runs on {} ranks", collective_name(c), nranks);
  return best;
}

bool AlgorithmSelector::usable(Algorithm a, int nranks, const HostLayout& hosts) const {
  if (a->needs_cross_memory && !cross_memory_) return false;
  return algorithm_supports(a, nranks, hosts);
}

}  // namespace bagua

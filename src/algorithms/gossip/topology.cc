#include "algorithms/gossip/topology.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>

#include "base/error.h"

namespace bagua {
namespace {

int ceil_log2(int n) {
  int k = 0;
  while ((1 << k) < n) ++k;
  return k;
}

int mod(long long a, int n) { return static_cast<int>(((a % n) + n) % n); }

// The plan of a graph given as "every rank i sends to i + shift for each shift" (a circulant), weight w each;
// shift k moves in phase k.
NeighborPlan circulant(int n, int rank, const std::vector<int>& shifts, double w) {
  NeighborPlan p;
  std::map<int, std::pair<double, int>> in;  // from -> (weight, phase)
  std::map<int, int> out;                    // to -> phase
  for (int k = 0; k < static_cast<int>(shifts.size()); ++k) {
    int to = mod(rank + shifts[k], n), from = mod(rank - shifts[k], n);
    if (to == rank) continue;
    out.emplace(to, k);
    auto [it, fresh] = in.emplace(from, std::make_pair(0.0, k));
    it->second.first += w;
  }
  double total = 0;
  for (auto& [to, phase] : out) p.sends.push_back(to), p.send_phase.push_back(phase);
  for (auto& [from, wp] : in) {
    p.receives.emplace_back(from, wp.first);
    p.receive_phase.push_back(wp.second);
    total += wp.first;
  }
  p.self_weight = 1.0 - total;
  p.phases = static_cast<int>(shifts.size());
  return p;
}

}  // namespace

Topology Topology::builtin(int n, bagua_topology_kind_t kind) {
  Topology t;
  t.nranks_ = n;
  switch (kind) {
    case BAGUA_TOPO_RING:
    case BAGUA_TOPO_EXPONENTIAL:
    case BAGUA_TOPO_ONE_PEER_EXPONENTIAL:
    case BAGUA_TOPO_FULL: break;
    case BAGUA_TOPO_SHIFT_ONE:
      if (n % 2 != 0)
        fail(BAGUA_ERR_INVALID_ARGUMENT, "BAGUA_TOPO_SHIFT_ONE pairs ranks: it needs an even number of them, not {}",
             n);
      break;
    default:
      fail(BAGUA_ERR_INVALID_ARGUMENT, "topology kind {} is not a bagua_topology_kind_t", static_cast<int>(kind));
  }
  t.kind_ = kind;
  return t;
}

Topology Topology::from_edges(int n, int nedges, const int* src, const int* dst, const double* weights,
                              bool metropolis) {
  if (n < 1) fail(BAGUA_ERR_INVALID_ARGUMENT, "a topology needs at least one rank, not {}", n);  // (fuzz_topology)
  if (nedges < 0) fail(BAGUA_ERR_INVALID_ARGUMENT, "nedges {} is negative", nedges);
  if (nedges > 0 && (src == nullptr || dst == nullptr)) fail(BAGUA_ERR_INVALID_ARGUMENT, "src or dst is NULL");
  if (nedges > 0 && !metropolis && weights == nullptr)
    fail(BAGUA_ERR_INVALID_ARGUMENT, "weights is NULL (pass metropolis_hastings = 1 to have them computed)");
  Topology t;
  t.nranks_ = n;
  t.in_edges_.assign(n, {});
  std::vector<std::vector<int>> neighbours(n);
  for (int e = 0; e < nedges; ++e) {
    if (src[e] < 0 || src[e] >= n || dst[e] < 0 || dst[e] >= n)
      fail(BAGUA_ERR_INVALID_ARGUMENT, "edge {} ({} -> {}) names a rank outside [0, {})", e, src[e], dst[e], n);
    if (src[e] == dst[e]) fail(BAGUA_ERR_INVALID_ARGUMENT, "edge {} is a self-loop on rank {}", e, src[e]);
    for (auto& [from, w] : t.in_edges_[dst[e]])
      if (from == src[e]) fail(BAGUA_ERR_INVALID_ARGUMENT, "edge {} -> {} is listed twice", src[e], dst[e]);
    double w = metropolis ? 0.0 : weights[e];
    if (!metropolis && !(std::isfinite(w) && w >= 0.0))
      fail(BAGUA_ERR_INVALID_ARGUMENT, "edge {} has weight {}: weights are finite and non-negative", e, w);
    t.in_edges_[dst[e]].emplace_back(src[e], w);
    neighbours[src[e]].push_back(dst[e]);
  }
  if (metropolis) {
    for (int d = 0; d < n; ++d)
      for (auto& [s, w] : t.in_edges_[d]) {
        bool symmetric = false;
        for (auto& [back, unused] : t.in_edges_[s]) symmetric = symmetric || back == d;
        if (!symmetric)
          fail(BAGUA_ERR_INVALID_ARGUMENT,
               "Metropolis-Hastings weights need a symmetric graph: {} -> {} has no reverse edge", s, d);
        w = 1.0 / (1.0 + static_cast<double>(std::max(neighbours[s].size(), neighbours[d].size())));
      }
  }
  for (int d = 0; d < n; ++d) {
    std::sort(t.in_edges_[d].begin(), t.in_edges_[d].end());
    double total = 0;
    for (auto& [s, w] : t.in_edges_[d]) total += w;
    if (total > 1.0 + 1e-12)
      fail(BAGUA_ERR_INVALID_ARGUMENT, "rank {}'s in-weights sum to {} > 1: its own weight would be negative", d,
           total);
  }
  return t;
}

uint64_t Topology::period() const {
  if (kind_ == BAGUA_TOPO_ONE_PEER_EXPONENTIAL) return std::max(1, ceil_log2(nranks_));
  if (kind_ == BAGUA_TOPO_SHIFT_ONE) return std::max(1, nranks_ / 2);
  return 1;
}

NeighborPlan Topology::plan(int rank, uint64_t step) const {
  const int n = nranks_;
  if (n == 1) return NeighborPlan{};
  switch (kind_) {
    case BAGUA_TOPO_RING:
      if (n == 2) return circulant(n, rank, {1}, 0.5);
      return circulant(n, rank, {1, -1}, 1.0 / 3.0);
    case BAGUA_TOPO_EXPONENTIAL: {
      std::vector<int> shifts;
      for (int k = 0; (1 << k) < n; ++k) shifts.push_back(1 << k);
      return circulant(n, rank, shifts, 1.0 / (1.0 + static_cast<double>(shifts.size())));
    }
    case BAGUA_TOPO_ONE_PEER_EXPONENTIAL: {
      int k = static_cast<int>(step % static_cast<uint64_t>(ceil_log2(n)));
      return circulant(n, rank, {1 << k}, 0.5);
    }
    case BAGUA_TOPO_SHIFT_ONE: {
      const int half = n / 2;
      const long long s = static_cast<long long>(step % static_cast<uint64_t>(half));
      int peer = rank < half ? mod(s + rank, half) + half : mod(rank - half - s, half);
      NeighborPlan p;
      p.self_weight = 0.5;
      p.sends = {peer};
      p.receives = {{peer, 0.5}};
      p.send_phase = p.receive_phase = {0};
      return p;
    }
    case BAGUA_TOPO_FULL: {
      std::vector<int> shifts;
      for (int k = 1; k < n; ++k) shifts.push_back(k);
      NeighborPlan p = circulant(n, rank, shifts, 1.0 / n);
      p.self_weight = 1.0 / n;  // exactly, rather than 1 - (n-1)/n
      return p;
    }
    default: break;
  }
  NeighborPlan p;  // user graph
  double total = 0;
  for (auto& [s, w] : in_edges_[rank]) p.receives.emplace_back(s, w), total += w;
  for (int d = 0; d < n; ++d)
    for (auto& [s, w] : in_edges_[d])
      if (s == rank) p.sends.push_back(d);
  p.send_phase.assign(p.sends.size(), 0);
  p.receive_phase.assign(p.receives.size(), 0);
  p.self_weight = 1.0 - total;
  return p;
}

uint64_t Topology::digest() const {
  uint64_t h = 1469598103934665603ull;
  auto mix = [&h](uint64_t v) {
    for (int b = 0; b < 8; ++b) h = (h ^ ((v >> (8 * b)) & 0xff)) * 1099511628211ull;
  };
  mix(static_cast<uint64_t>(nranks_));
  mix(static_cast<uint64_t>(kind_ + 1));
  mix(hierarchical ? 1 : 0);
  for (uint64_t s = 0; s < period(); ++s)
    for (int r = 0; r < nranks_; ++r) {
      NeighborPlan p = plan(r, s);
      uint64_t bits;
      std::memcpy(&bits, &p.self_weight, 8);
      mix(bits);
      for (int to : p.sends) mix(static_cast<uint64_t>(to));
      for (auto& [from, w] : p.receives) {
        std::memcpy(&bits, &w, 8);
        mix(static_cast<uint64_t>(from));
        mix(bits);
      }
    }
  return h;
}

std::string Topology::describe() const { return name(false); }

const char* Topology::name(bool on_hosts) const {
  switch (kind_) {
    case BAGUA_TOPO_RING: return on_hosts ? "ring of hosts" : "ring";
    case BAGUA_TOPO_EXPONENTIAL: return on_hosts ? "exponential over hosts" : "exponential";
    case BAGUA_TOPO_ONE_PEER_EXPONENTIAL: return on_hosts ? "one-peer exponential over hosts" : "one-peer exponential";
    case BAGUA_TOPO_SHIFT_ONE: return on_hosts ? "shift-one over hosts" : "shift-one";
    case BAGUA_TOPO_FULL: return on_hosts ? "full over hosts" : "full";
    default: return on_hosts ? "user graph of hosts" : "user graph";
  }
}

}  // namespace bagua

// Gossip topologies (bagua_topology_t): for each step, who sends to whom and with which weight.
// Rank i's update is x_i <- w_ii x_i + sum_j w_ji x_j over its in-neighbours j. Built-in kinds follow
// docs/relaxations.md; a user graph is static. All pure rank arithmetic: every rank computes the same graph.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "bagua/bagua.h"

namespace bagua {

struct NeighborPlan {
  double self_weight = 1.0;
  std::vector<int> sends;                        // out-neighbours, ascending
  std::vector<std::pair<int, double>> receives;  // (in-neighbour, its weight), ascending rank
  // Circulant graphs move one shift at a time (each link then carries one flow per direction):
  // phase of each send / receive, matching on both ends. Other graphs: all in phase 0.
  std::vector<int> send_phase, receive_phase;
  int phases = 1;
};

class Topology {
 public:
  // Throws INVALID_ARGUMENT (bad kind, SHIFT_ONE with odd n).
  static Topology builtin(int nranks, bagua_topology_kind_t kind);
  // Edge e: src[e] -> dst[e] with weights[e]; own weight 1 - in-weights. metropolis: w = 1/(1+max(deg)).
  static Topology from_edges(int nranks, int nedges, const int* src, const int* dst, const double* weights,
                             bool metropolis);

  int nranks() const { return nranks_; }
  // Steps after which the graph repeats (1 for static graphs).
  uint64_t period() const;
  NeighborPlan plan(int rank, uint64_t step) const;
  // A digest of the graph over one period, equal on ranks that hold the same topology.
  uint64_t digest() const;
  std::string describe() const;
  // The kind's name (a static string); on_hosts: the hierarchical form, whose graph joins hosts.
  const char* name(bool on_hosts) const;

  bool hierarchical = false;  // on a multi-host communicator: built over the hosts, not the ranks

 private:
  int nranks_ = 1;
  int kind_ = -1;  // bagua_topology_kind_t, or -1 for a user graph
  // user graph: per destination, (source, weight), ascending source
  std::vector<std::vector<std::pair<int, double>>> in_edges_;
};

}  // namespace bagua

// Algorithm selection: a pure function of (collective, bytes, nranks, host layout, configuration, and the
// cross-memory verdict, shared-copy factor and ranks-share-cores fact that all ranks agreed on at init), so every
// rank picks the same.
// BAGUA_ALGO rules come first; otherwise a latency-bandwidth cost model with constants measured offline on a 2-core
// host with UCX shared memory, and one measured at init (docs/algorithms.md).
//
// BAGUA_ALGO grammar:
//   spec := rule (';' rule)*     rule := collective ':' [range ':'] algorithm (',' range ':' algorithm)*
//                      range := [size] '-' [size]   (half-open [lo, hi); sizes in bytes with K, M, G suffixes)
// e.g. "allreduce:ring", "allreduce:0-64K:rd,64K-:ring;broadcast:tree".
#pragma once

#include <string>
#include <vector>

#include "algorithms/cost_model.h"
#include "algorithms/registry.h"

namespace bagua {

class AlgorithmSelector {
 public:
  AlgorithmSelector() = default;
  // Throws INVALID_USAGE naming BAGUA_ALGO when the text does not parse.
  // cross_memory: whether ranks of a host can read and write each other's memory (the single-copy probe
  // succeeded on every rank at init): the direct allreduce needs it.
  explicit AlgorithmSelector(const std::string& spec, double inter_host_gbps = 1.25, bool cross_memory = false);
  // The algorithm for a call: a matching BAGUA_ALGO rule that supports nranks, else the cheapest by the model.
  Algorithm choose(Collective c, size_t bytes, int nranks, const HostLayout& hosts = {}) const;
  Algorithm model_choice(Collective c, size_t bytes, int nranks, const HostLayout& hosts = {}) const;
  // Why choose() picks what it picks, for the debug log: the BAGUA_ALGO rule, or each usable algorithm's
  // modelled time ("ring 12.3 us, rd 10.1 us").
  std::string explain(Collective c, size_t bytes, int nranks, const HostLayout& hosts = {}) const;
  const CostModel& model() const { return model_; }
  // Measured when the communicator was made and agreed by its ranks (algorithms/calibration.h): one factor for
  // every block size, or a curve through two.
  void set_shared_copy_factor(double factor) { model_.shared_copy_factor = {0, factor, 0, factor}; }
  void set_shared_copy_factor(const CostModel::SharedCopyFactor& curve) { model_.shared_copy_factor = curve; }
  // Whether the communicator's ranks outnumber their cores: the same on every rank.
  void set_ranks_share_cores(bool share) { model_.ranks_share_cores = share; }

 private:
  struct Rule {
    Collective collective;
    size_t lo;
    size_t hi;
    Algorithm algorithm;
  };
  bool usable(Algorithm a, int nranks, const HostLayout& hosts) const;
  std::vector<Rule> rules_;
  CostModel model_;
  bool cross_memory_ = false;
};

// Parses "64K", "1M", "1048576" (bytes); false when malformed.
bool parse_byte_size(const std::string& text, size_t* out);

}  // namespace bagua

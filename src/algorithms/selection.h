// Algorithm selection: a pure function of (collective, bytes, nranks, host layout, configuration, and the
// cross-memory verdict all ranks agreed on at init), so every rank picks the same. BAGUA_ALGO rules come first;
// otherwise a latency-bandwidth cost model with constants measured offline on a 2-core host with UCX shared memory
// (docs/algorithms.md).
//
// BAGUA_ALGO grammar:  spec := rule (';' rule)*     rule := collective ':' [range ':'] algorithm (',' range ':'
// algorithm)*
//                      range := [size] '-' [size]   (half-open [lo, hi); sizes in bytes with K, M, G suffixes)
// e.g. "allreduce:ring", "allreduce:0-64K:rd,64K-:ring;broadcast:tree".
#pragma once

#include <string>
#include <vector>

#include "algorithms/collectives.h"

namespace bagua {

// Constants measured on this project's 2-core development host (UCX 1.13 shared memory, single-copy
// transfers, AVX-512 reductions) with bagua_allreduce_perf and every algorithm forced; docs/algorithms.md.
struct CostModel {
  double latency_us = 2.5;      // alpha: one round of messages
  double rendezvous_us = 3.0;   // extra per round when its messages exceed the eager limit
  size_t eager_limit = 8192;    // UCX switches from eager to rendezvous above this (tag_send table; only
                                // the rail's SendMode::kEager pieces go eagerly up to 2 MiB)
  double single_copy_us = 4.0;  // extra per round whose messages take the single-copy handshake
  size_t single_copy_limit = 64 << 10;
  double per_message_us = 0.4;      // extra per message when a round talks to many peers
  double link_gbps = 6.5;           // beta: bytes moved per rank within a host, GB/s
  double inter_host_gbps = 1.25;    // bytes a host sends to other hosts, GB/s (BAGUA_INTER_HOST_GBPS; 10 GbE)
  double reduce_gbps = 10.0;        // gamma: reduction speed, GB/s of input (memory-bound at size)
  double direct_move_factor = 0.6;  // direct allreduce: time per byte moved against the ring's (it reads N
                                    // and writes N per rank, the ring reads 1.5N and writes N)
  double cross_memory_us = 1.0;     // one process_vm_readv/writev call of a direct allreduce segment
  // hosts: the communicator's layout. Across hosts, flat algorithms are bound by the inter-host link that
  // their ring or tree crosses; hierarchical ones move 2(H-1)/H of the vector per host across hosts.
  double cost_us(Collective c, Algorithm a, size_t bytes, int nranks, const HostLayout& hosts = {}) const;
};

class AlgorithmSelector {
 public:
  AlgorithmSelector() = default;
  // Throws INVALID_USAGE naming BAGUA_ALGO when the text does not parse.
  explicit AlgorithmSelector(const std::string& spec, double inter_host_gbps = 1.25);
  // The algorithm for a call: a matching BAGUA_ALGO rule that supports nranks, else the cheapest by the model.
  Algorithm choose(Collective c, size_t bytes, int nranks, const HostLayout& hosts = {}) const;
  Algorithm model_choice(Collective c, size_t bytes, int nranks, const HostLayout& hosts = {}) const;
  const CostModel& model() const { return model_; }
  // Whether ranks of a host can read and write each other's memory (the single-copy probe succeeded on every
  // rank): the direct allreduce needs it. Off by default.
  void set_cross_memory(bool available) { cross_memory_ = available; }

 private:
  struct Rule {
    Collective collective;
    size_t lo;
    size_t hi;
    Algorithm algorithm;
  };
  bool usable(Collective c, Algorithm a, int nranks, const HostLayout& hosts) const;
  std::vector<Rule> rules_;
  CostModel model_;
  bool cross_memory_ = false;
};

// Parses "64K", "1M", "1048576" (bytes); false when malformed.
bool parse_byte_size(const std::string& text, size_t* out);

}  // namespace bagua

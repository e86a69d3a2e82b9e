// The latency-bandwidth cost model that selection ranks algorithms by. Constants were measured on this project's
// 2-core development host (UCX 1.13 shared memory, single-copy transfers, AVX-512 reductions) with
// bagua_allreduce_perf and every algorithm forced (docs/algorithms.md).
#pragma once

#include <cstddef>

#include "algorithms/collective_args.h"

namespace bagua {

struct CostModel {
  double latency_us = 2.5;      // alpha: one round of messages
  double rendezvous_us = 3.0;   // extra per round when its messages exceed the eager limit
  size_t eager_limit = 8192;    // UCX switches from eager to rendezvous above this (tag_send table; only
                                // the rail's SendMode::kEager pieces go eagerly up to 2 MiB)
  double single_copy_us = 4.0;  // extra per round whose messages take the single-copy handshake
  size_t single_copy_limit = 64 << 10;
  double per_message_us = 0.4;         // extra per message when a round talks to many peers
  double link_gbps = 6.5;              // beta: bytes moved per rank within a host, GB/s
  double inter_host_gbps = 1.25;       // bytes a host sends to other hosts, GB/s (BAGUA_INTER_HOST_GBPS; 10 GbE)
  double reduce_gbps = 10.0;           // gamma: reduction speed, GB/s of input (memory-bound at size)
  double direct_move_factor = 0.6;     // direct allreduce: time per byte moved against the ring's (it reads N
                                       // and writes N per rank, the ring reads 1.5N and writes N)
  double cross_memory_us = 1.0;        // one process_vm_readv/writev call of a direct allreduce segment
  double peer_memory_setup_us = 10.0;  // the peer_memory algorithms' rounds beyond two (not the direct allreduce's):
                                       // their floor was 16-24 us at 4 KiB on 2 ranks, where 2 alpha is 5
  // Alltoall through shared segments: time per byte against a single-copy read, by block size (bytes per peer).
  // Offline 0.5 at every size; init may measure it at one or two block sizes (algorithms/calibration.h).
  struct SharedCopyFactor {
    double small_block = 0, at_small = 0.5;  // at and below small_block
    double large_block = 0, at_large = 0.5;  // at and above large_block; linear in log2(block) between
    double at(double block) const;
  };
  SharedCopyFactor shared_copy_factor;
  // Where ranks outnumber cores, each alltoall message of direct and pairwise waits until its peer runs (to read a
  // single-copy block, or to take an eager one): extra per round against shm (3 and 4 ranks on 2 cores: 16 KiB in
  // all 10.8 against shm's 9.2 us, 64 KiB 19.8 against 16.0 and 27.1 against 22.8; docs/algorithms.md, "Measured at
  // init").
  double shared_cores_round_us = 4.0;
  bool ranks_share_cores = false;  // this communicator's ranks outnumber their cores (set from the communicator)
  // A quantized allreduce of fewer input bytes sends full precision: below these sizes its extra rounds and
  // compression cost more than the bytes it saves (bagua_quantized_perf, docs/relaxations.md). Within one host
  // (shared memory) and across hosts (1 Gbit/s test bed). BAGUA_QUANTIZED_MIN_BYTES overrides both.
  size_t quantized_min_bytes_one_host = 1 << 20;
  size_t quantized_min_bytes_hosts = 32 << 10;
  // hierarchical = AUTO takes a hierarchical form only for formats of at least this many wire bits per element:
  // below, its full-precision exchange inside each host costs about what the inter-host bytes it saves gain (2 hosts
  // x 2 ranks, 1 and 10 Gbit/s, 16 and 64 MiB: the rail form won at 8, 4 and 2 bits; with sign the flat form won,
  // 14.3x against 11.6x at 16 MiB and 1 Gbit/s; docs/relaxations.md).
  double quantized_hierarchical_min_bits = 1.5;
  // A quantized allreduce whose alltoall and allgather each move at most this many compressed bytes per rank
  // runs each in one round, every block at once, instead of m - 1 pairwise or ring rounds (4 hosts x 1, 1 Gbit/s:
  // 4 MiB at 2 bits and sign, 192 and 96 KiB, ran 1.5-2x faster in one round; 384 KiB phases (16 MiB sign) 1.25x
  // faster since the scratch cache fix; 768 KiB 25% slower; docs/relaxations.md). BAGUA_QUANTIZED_ONE_ROUND_BYTES
  // overrides it.
  size_t quantized_one_round_bytes = 512 << 10;
};

// The terms every algorithm's cost is written in, for one call: m bytes on n ranks laid out as hosts. Across
// hosts, flat algorithms are bound by the inter-host link that their ring or tree crosses; hierarchical ones
// move 2(H-1)/H of the vector per host across hosts.
struct CostTerms {
  CostTerms(const CostModel& model, size_t bytes, int nranks, const HostLayout& hosts);

  const CostModel& model;
  double m;           // bytes
  int n;              // ranks
  int H;              // hosts
  double L;           // ranks on the fullest host
  double alpha;       // us per round
  double delta;       // us per extra message in a round
  double beta_intra;  // us per byte within a host
  double beta_inter;  // us per byte between hosts
  double beta;        // what flat algorithms see: beta_inter on several hosts
  double gamma;       // us per byte reduced
  double levels;      // ceil(log2 n)
  int p;              // recursive algorithms' power-of-two core
  double lp;          // log2 p
  double frac;        // (n-1)/n
  double fold_cost;   // folding the ranks outside the core in and out again

  // Latency of one round whose messages are `msg` bytes (eager or rendezvous, single-copy or not).
  double round(double msg) const;
  // Hierarchical terms: what each host sends to the others, and a ring reduce-scatter + allgather in a host.
  double inter() const { return 2.0 * (H - 1) / H * m * beta_inter; }
  double intra_rs_ag() const { return 2 * (L - 1) * alpha + 2 * (L - 1) / L * m * beta_intra; }
  // Rooted collectives through host leaders: one step inside the root's host, a binomial tree among leaders.
  double leader_tree() const;
};

}  // namespace bagua

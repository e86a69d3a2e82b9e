// Every collective's arguments in one struct, the algorithms that exist for each, and the builders that
// turn a call into a Schedule (or, for the pipelined ring allreduce, its own Operation).
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "algorithms/operation.h"
#include "algorithms/schedule.h"

namespace bagua {

enum class Collective {
  kAllreduce,
  kReduceScatter,
  kAllgather,
  kBroadcast,
  kReduce,
  kAlltoall,
  kAlltoallv,
  kGather,
  kScatter,
  kBarrier,
  kCount
};

enum class Algorithm {
  kAuto,
  kRing,                 // pipelined ring (allreduce), ring steps (reduce_scatter, allgather)
  kRecursiveDoubling,    // allreduce (any n, folding), allgather (power-of-two n)
  kRabenseifner,         // allreduce: recursive halving reduce-scatter + recursive doubling allgather
  kTree,                 // binomial tree (broadcast, reduce; allreduce = reduce to rank 0 + broadcast)
  kScatterAllgather,     // broadcast of large messages
  kReduceScatterGather,  // reduce of large messages
  kDirect,               // one round, every peer at once (reduce_scatter, allgather, alltoall(v), gather, scatter);
                         // allreduce on one host: owners read inputs and write results by cross-memory attach
  kPairwise,             // n-1 rounds, one peer each (alltoall(v))
  kDissemination,        // barrier
  kHierarchical,        // across hosts: rail allreduce (same ranks per host); leader-based reduce, broadcast, allgather
  kHierarchicalLeader,  // allreduce through one leader per host (any layout)
  kCount
};

const char* collective_name(Collective c);  // "allreduce"
const char* algorithm_name(Algorithm a);    // "ring"
bool parse_collective(const std::string& text, Collective* out);
bool parse_algorithm(const std::string& text, Algorithm* out);
// The ranks of each host (host order as Comm::hosts); one entry for a single-host communicator.
using HostLayout = std::vector<std::vector<int>>;

// Whether `a` can run `c` on nranks ranks laid out as `hosts` (e.g. recursive doubling allgather needs a
// power of two; hierarchical algorithms need several hosts; the rail allreduce needs as many ranks on each).
bool algorithm_supports(Collective c, Algorithm a, int nranks, const HostLayout& hosts = {});

struct CollectiveArgs {
  Collective collective = Collective::kAllreduce;
  const void* sendbuf = nullptr;
  void* recvbuf = nullptr;
  // allreduce/broadcast/reduce: count; allgather/gather: per-rank send count; reduce_scatter/scatter:
  // per-rank receive count; alltoall: count per peer.
  size_t count = 0;
  bagua_datatype_t dtype = BAGUA_FLOAT32;
  bagua_redop_t op = BAGUA_SUM;
  int root = 0;
  const size_t* sendcounts = nullptr;  // alltoallv, in elements
  const size_t* sdispls = nullptr;
  const size_t* recvcounts = nullptr;
  const size_t* rdispls = nullptr;

  // Bytes this rank moves into the collective (what selection reasons about): count x datatype size,
  // times nranks for the per-rank-count collectives.
  size_t message_bytes(int nranks) const;
};

TagKind tag_kind_of(Collective c);

// Builds the operation for `args` with a concrete algorithm (never kAuto).
std::unique_ptr<Operation> build_collective(const CollectiveArgs& args, Algorithm algorithm, const ScheduleContext& ctx,
                                            std::string description);

// Schedule builders, one per (collective, algorithm) pair (allreduce_algorithms.cc, *_algorithms.cc).
std::unique_ptr<Schedule> allreduce_recursive_doubling(const CollectiveArgs& a, const ScheduleContext& ctx);
std::unique_ptr<Schedule> allreduce_tree(const CollectiveArgs& a, const ScheduleContext& ctx);
std::unique_ptr<Schedule> allreduce_rabenseifner(const CollectiveArgs& a, const ScheduleContext& ctx);
// One host, single-copy enabled: src/algorithms/direct_allreduce.cc.
std::unique_ptr<Schedule> allreduce_direct(const CollectiveArgs& a, const ScheduleContext& ctx);
std::unique_ptr<Schedule> reduce_scatter_ring(const CollectiveArgs& a, const ScheduleContext& ctx);
std::unique_ptr<Schedule> reduce_scatter_direct(const CollectiveArgs& a, const ScheduleContext& ctx);
std::unique_ptr<Schedule> allgather_ring(const CollectiveArgs& a, const ScheduleContext& ctx);
std::unique_ptr<Schedule> allgather_recursive_doubling(const CollectiveArgs& a, const ScheduleContext& ctx);
std::unique_ptr<Schedule> allgather_direct(const CollectiveArgs& a, const ScheduleContext& ctx);
std::unique_ptr<Schedule> broadcast_tree(const CollectiveArgs& a, const ScheduleContext& ctx);
std::unique_ptr<Schedule> broadcast_scatter_allgather(const CollectiveArgs& a, const ScheduleContext& ctx);
std::unique_ptr<Schedule> reduce_tree(const CollectiveArgs& a, const ScheduleContext& ctx);
std::unique_ptr<Schedule> reduce_scatter_gather(const CollectiveArgs& a, const ScheduleContext& ctx);
std::unique_ptr<Schedule> alltoall_direct(const CollectiveArgs& a, const ScheduleContext& ctx);
std::unique_ptr<Schedule> alltoall_pairwise(const CollectiveArgs& a, const ScheduleContext& ctx);
std::unique_ptr<Schedule> gather_direct(const CollectiveArgs& a, const ScheduleContext& ctx);
std::unique_ptr<Schedule> scatter_direct(const CollectiveArgs& a, const ScheduleContext& ctx);
std::unique_ptr<Schedule> barrier_dissemination(const CollectiveArgs& a, const ScheduleContext& ctx);
std::unique_ptr<Schedule> allreduce_hierarchical(const CollectiveArgs& a, const ScheduleContext& ctx);
std::unique_ptr<Schedule> allreduce_hierarchical_leader(const CollectiveArgs& a, const ScheduleContext& ctx);
std::unique_ptr<Schedule> reduce_hierarchical(const CollectiveArgs& a, const ScheduleContext& ctx);
std::unique_ptr<Schedule> broadcast_hierarchical(const CollectiveArgs& a, const ScheduleContext& ctx);
std::unique_ptr<Schedule> allgather_hierarchical(const CollectiveArgs& a, const ScheduleContext& ctx);

}  // namespace bagua

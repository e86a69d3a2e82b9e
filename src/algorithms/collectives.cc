#include "algorithms/collectives.h"

#include <cstring>

#include "algorithms/ring_allreduce.h"
#include "core/error.h"
#include "kernels/dtype.h"

namespace bagua {

namespace {
const char* const kCollectiveNames[] = {"allreduce", "reduce_scatter", "allgather", "broadcast", "reduce",
                                        "alltoall",  "alltoallv",      "gather",    "scatter",   "barrier"};
const char* const kAlgorithmNames[] = {"auto",      "ring",   "rd",       "rabenseifner",  "tree", "scatter_allgather",
                                       "rs_gather", "direct", "pairwise", "dissemination", "hier", "hier_leader"};
static_assert(sizeof(kCollectiveNames) / sizeof(kCollectiveNames[0]) == static_cast<size_t>(Collective::kCount));
static_assert(sizeof(kAlgorithmNames) / sizeof(kAlgorithmNames[0]) == static_cast<size_t>(Algorithm::kCount));

bool power_of_two(int n) { return n > 0 && (n & (n - 1)) == 0; }
}  // namespace

const char* collective_name(Collective c) { return kCollectiveNames[static_cast<int>(c)]; }
const char* algorithm_name(Algorithm a) { return kAlgorithmNames[static_cast<int>(a)]; }

bool parse_collective(const std::string& text, Collective* out) {
  for (int i = 0; i < static_cast<int>(Collective::kCount); ++i)
    if (text == kCollectiveNames[i]) {
      *out = static_cast<Collective>(i);
      return true;
    }
  return false;
}

bool parse_algorithm(const std::string& text, Algorithm* out) {
  for (int i = 0; i < static_cast<int>(Algorithm::kCount); ++i)
    if (text == kAlgorithmNames[i]) {
      *out = static_cast<Algorithm>(i);
      return true;
    }
  return false;
}

bool algorithm_supports(Collective c, Algorithm a, int nranks, const HostLayout& hosts) {
  if (a == Algorithm::kHierarchical || a == Algorithm::kHierarchicalLeader) {
    if (hosts.size() < 2) return false;
    if (c == Collective::kAllreduce && a == Algorithm::kHierarchical) {
      for (const auto& h : hosts)
        if (h.size() != hosts.front().size()) return false;  // the rail needs the same ranks on every host
      return true;
    }
    if (c == Collective::kAllreduce) return true;
    if (c == Collective::kAllgather)  // leaders send one message per rank of their host in one round (<= 64)
      for (const auto& h : hosts)
        if (h.size() > 64) return false;
    return a == Algorithm::kHierarchical &&
           (c == Collective::kReduce || c == Collective::kBroadcast || c == Collective::kAllgather);
  }
  switch (c) {
    case Collective::kAllreduce:
      return a == Algorithm::kRing || a == Algorithm::kRecursiveDoubling || a == Algorithm::kRabenseifner ||
             a == Algorithm::kTree || (a == Algorithm::kDirect && hosts.size() <= 1);
    case Collective::kReduceScatter: return a == Algorithm::kRing || a == Algorithm::kDirect;
    case Collective::kAllgather:
      return a == Algorithm::kRing || a == Algorithm::kDirect ||
             (a == Algorithm::kRecursiveDoubling && power_of_two(nranks));
    case Collective::kBroadcast: return a == Algorithm::kTree || a == Algorithm::kScatterAllgather;
    case Collective::kReduce: return a == Algorithm::kTree || a == Algorithm::kReduceScatterGather;
    case Collective::kAlltoall:
    case Collective::kAlltoallv: return a == Algorithm::kDirect || a == Algorithm::kPairwise;
    case Collective::kGather:
    case Collective::kScatter: return a == Algorithm::kDirect;
    case Collective::kBarrier: return a == Algorithm::kDissemination;
    case Collective::kCount: break;
  }
  return false;
}

TagKind tag_kind_of(Collective c) {
  static const TagKind kKinds[] = {
      TagKind::kAllreduce, TagKind::kReduceScatter, TagKind::kAllgather, TagKind::kBroadcast, TagKind::kReduce,
      TagKind::kAlltoall,  TagKind::kAlltoallv,     TagKind::kGather,    TagKind::kScatter,   TagKind::kBarrier};
  return kKinds[static_cast<int>(c)];
}

size_t CollectiveArgs::message_bytes(int nranks) const {
  size_t bytes = count * datatype_size(dtype);
  switch (collective) {
    case Collective::kReduceScatter:
    case Collective::kAllgather:
    case Collective::kAlltoall:
    case Collective::kGather:
    case Collective::kScatter: return bytes * static_cast<size_t>(nranks);
    case Collective::kAlltoallv:
      return 0;  // counts differ per rank; selection must not, so alltoallv is chosen as for an empty message
    default: return bytes;
  }
}

std::unique_ptr<Operation> build_collective(const CollectiveArgs& a, Algorithm algorithm, const ScheduleContext& ctx,
                                            std::string description) {
  static const bagua_opkind_t kKinds[] = {BAGUA_OPKIND_ALLREDUCE, BAGUA_OPKIND_REDUCE_SCATTER, BAGUA_OPKIND_ALLGATHER,
                                          BAGUA_OPKIND_BROADCAST, BAGUA_OPKIND_REDUCE,         BAGUA_OPKIND_ALLTOALL,
                                          BAGUA_OPKIND_ALLTOALLV, BAGUA_OPKIND_GATHER,         BAGUA_OPKIND_SCATTER,
                                          BAGUA_OPKIND_BARRIER};
  bagua_opkind_t kind = kKinds[static_cast<int>(a.collective)];
  if (a.collective == Collective::kAllreduce && algorithm == Algorithm::kRing) {
    RingAllreduceArgs ring{
        a.sendbuf,       a.recvbuf,           a.count,         a.dtype,        a.op,
        ctx.rank,        ctx.nranks,          ctx.comm_id,     ctx.sequence,   ctx.ring_segment_bytes,
        ctx.ring_window, ctx.ring_position(), ctx.ring_next(), ctx.ring_prev()};
    return std::make_unique<RingAllreduce>(ring, std::move(description));
  }
  using Builder = std::unique_ptr<Schedule> (*)(const CollectiveArgs&, const ScheduleContext&);
  Builder builder = nullptr;
  switch (a.collective) {
    case Collective::kAllreduce:
      builder = algorithm == Algorithm::kRecursiveDoubling    ? allreduce_recursive_doubling
                : algorithm == Algorithm::kTree               ? allreduce_tree
                : algorithm == Algorithm::kHierarchical       ? allreduce_hierarchical
                : algorithm == Algorithm::kHierarchicalLeader ? allreduce_hierarchical_leader
                : algorithm == Algorithm::kDirect             ? allreduce_direct
                                                              : allreduce_rabenseifner;
      break;
    case Collective::kReduceScatter:
      builder = algorithm == Algorithm::kDirect ? reduce_scatter_direct : reduce_scatter_ring;
      break;
    case Collective::kAllgather:
      builder = algorithm == Algorithm::kDirect              ? allgather_direct
                : algorithm == Algorithm::kRecursiveDoubling ? allgather_recursive_doubling
                : algorithm == Algorithm::kHierarchical      ? allgather_hierarchical
                                                             : allgather_ring;
      break;
    case Collective::kBroadcast:
      builder = algorithm == Algorithm::kTree           ? broadcast_tree
                : algorithm == Algorithm::kHierarchical ? broadcast_hierarchical
                                                        : broadcast_scatter_allgather;
      break;
    case Collective::kReduce:
      builder = algorithm == Algorithm::kTree           ? reduce_tree
                : algorithm == Algorithm::kHierarchical ? reduce_hierarchical
                                                        : reduce_scatter_gather;
      break;
    case Collective::kAlltoall:
    case Collective::kAlltoallv:
      builder = algorithm == Algorithm::kPairwise ? alltoall_pairwise : alltoall_direct;
      break;
    case Collective::kGather: builder = gather_direct; break;
    case Collective::kScatter: builder = scatter_direct; break;
    case Collective::kBarrier: builder = barrier_dissemination; break;
    case Collective::kCount: break;
  }
  if (builder == nullptr || !algorithm_supports(a.collective, algorithm, ctx.nranks, ctx.hosts))
    fail(BAGUA_ERR_INTERNAL, "no {} algorithm '{}' for {} ranks", collective_name(a.collective),
         algorithm_name(algorithm), ctx.nranks);
  return std::make_unique<ScheduleOp>(kind, std::move(description), builder(a, ctx));
}

}  // namespace bagua

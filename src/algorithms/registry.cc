#include "algorithms/registry.h"

#include <array>

namespace bagua {

// Defined one per file under src/algorithms/<collective>/. An explicit list, since static self-registration
// disappears in static links. Within a collective, the order breaks ties between equal modelled costs: alltoallv,
// chosen as for an empty message (its counts differ per rank), takes shared memory where it ties with direct.
extern const AlgorithmEntry kAllreduceRing, kAllreduceRd, kAllreduceRabenseifner, kAllreduceTree, kAllreduceDirect,
    kAllreduceHier, kAllreduceHierLeader, kReduceScatterRing, kReduceScatterDirect, kAllgatherRing, kAllgatherRd,
    kAllgatherDirect, kAllgatherHier, kBroadcastTree, kBroadcastScatterAllgather, kBroadcastHier, kReduceTree,
    kReduceRsGather, kReduceHier, kAlltoallDirect, kAlltoallPairwise, kAlltoallSharedMemory, kAlltoallvSharedMemory,
    kAlltoallvDirect, kAlltoallvPairwise, kGatherDirect, kScatterDirect, kBarrierDissemination,
    kReduceScatterPeerMemory, kAllgatherPeerMemory, kBroadcastPeerMemory, kReducePeerMemory, kAlltoallPeerMemory,
    kAlltoallvPeerMemory, kGatherPeerMemory, kScatterPeerMemory;

namespace {

const AlgorithmEntry* const kTable[] = {
    &kAllreduceRing,
    &kAllreduceRd,
    &kAllreduceRabenseifner,
    &kAllreduceTree,
    &kAllreduceDirect,
    &kAllreduceHier,
    &kAllreduceHierLeader,
    &kReduceScatterRing,
    &kReduceScatterDirect,
    &kReduceScatterPeerMemory,
    &kAllgatherRing,
    &kAllgatherRd,
    &kAllgatherDirect,
    &kAllgatherHier,
    &kAllgatherPeerMemory,
    &kBroadcastTree,
    &kBroadcastScatterAllgather,
    &kBroadcastHier,
    &kBroadcastPeerMemory,
    &kReduceTree,
    &kReduceRsGather,
    &kReduceHier,
    &kReducePeerMemory,
    &kAlltoallDirect,
    &kAlltoallPairwise,
    &kAlltoallSharedMemory,
    &kAlltoallPeerMemory,
    &kAlltoallvSharedMemory,
    &kAlltoallvDirect,
    &kAlltoallvPairwise,
    &kAlltoallvPeerMemory,
    &kGatherDirect,
    &kGatherPeerMemory,
    &kScatterDirect,
    &kScatterPeerMemory,
    &kBarrierDissemination,
};

std::array<std::vector<Algorithm>, static_cast<size_t>(Collective::kCount)> by_collective() {
  std::array<std::vector<Algorithm>, static_cast<size_t>(Collective::kCount)> out;
  for (Algorithm a : kTable) out[static_cast<size_t>(a->collective)].push_back(a);
  return out;
}

}  // namespace

const std::vector<Algorithm>& algorithms_of(Collective c) {
  static const auto table = by_collective();
  return table[static_cast<size_t>(c)];
}

Algorithm find_algorithm(Collective c, std::string_view name) {
  for (Algorithm a : algorithms_of(c))
    if (name == a->name) return a;
  return nullptr;
}

bool algorithm_supports(Algorithm a, int nranks, const HostLayout& hosts) {
  return a->supports == nullptr || a->supports(nranks, hosts);
}

}  // namespace bagua

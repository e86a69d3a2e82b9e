// libFuzzer target: gossip topologies from an edge list (Topology::from_edges), with Metropolis-Hastings weights
// or given ones. Input: nranks, then (src, dst, weight) triples. An Error is a refusal (fine) unless INTERNAL.
#include <cstdint>
#include <cstring>
#include <vector>

#include "algorithms/gossip/topology.h"
#include "base/error.h"

using namespace bagua;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const int nranks = static_cast<int8_t>(data[0]);
  const bool metropolis = data[1] & 1;
  std::vector<int> src, dst;
  std::vector<double> weights;
  for (size_t at = 2; at + 2 <= size; at += 3) {
    src.push_back(static_cast<int8_t>(data[at]));
    dst.push_back(static_cast<int8_t>(data[at + 1]));
    weights.push_back(at + 2 < size ? (static_cast<int>(data[at + 2]) - 64) / 128.0 : 0.5);
  }
  const bool no_weights = (data[1] & 2) != 0;
  try {
    Topology::from_edges(nranks, static_cast<int>(src.size()), src.data(), dst.data(),
                         no_weights ? nullptr : weights.data(), metropolis);
  } catch (const Error& e) {
    if (e.status() == BAGUA_ERR_INTERNAL) __builtin_trap();  // a bug, not a refusal
  }
  return 0;
}

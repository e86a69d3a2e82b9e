// Low-precision decentralized SGD on a ring (BAGUA's low_precision_decentralized, after DCD-PSGD):
// every rank keeps replicas of itself and of its ring neighbours, all updated by the same compressed
// differences, so rank i's replica of a neighbour is bit-equal to that neighbour's own replica.
//   step(x):  t = x + sum_j w_j xhat_j + w_self xhat_self - xhat_self     (ring weights, on the replicas)
//             q = C(t - xhat_self)            (min-max per chunk, optional error feedback) -> both neighbours
//             xhat_self += deq(q), xhat_j += deq(q_j);  x = xhat_self
#pragma once

#include <map>
#include <vector>

#include "algorithms/gossip/topology.h"
#include "algorithms/quantized/codec.h"
#include "core/comm.h"

namespace bagua {

class LowPrecisionDecentralized {
 public:
  // Collective: exchanges the initial weights with the ring neighbours (full precision).
  LowPrecisionDecentralized(Comm& comm, size_t count, const Codec& codec, const float* initial);
  void step(float* x);
  // which: -1 left neighbour, 0 self, +1 right neighbour.
  const std::vector<float>& replica(int which) const;
  Comm& comm() { return comm_; }
  size_t count() const { return count_; }

 private:
  Comm& comm_;
  size_t count_;
  Codec codec_;
  Topology ring_;
  std::vector<float> self_;
  std::map<int, std::vector<float>> neighbours_;  // by rank
  std::vector<float> error_;                      // error feedback (empty when off)
  uint64_t steps_ = 0;
};

}  // namespace bagua

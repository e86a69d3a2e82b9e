// Low-precision decentralized SGD on a ring (BAGUA's low_precision_decentralized, after DCD-PSGD):
// every rank keeps replicas of itself and of its ring neighbours, all updated by the same compressed
// differences, so rank i's replica of a neighbour is bit-equal to that neighbour's own replica.
//   step(x):  t = x + sum_j w_j xhat_j + w_self xhat_self - xhat_self     (ring weights, on the replicas)
//             q = C(t - xhat_self)            (min-max per chunk, optional error feedback) -> both neighbours
//             xhat_self += deq(q), xhat_j += deq(q_j);  x = xhat_self
// Every step is element-wise on the replicas, so a caller may keep them in its own arrays and step any slice
// (the bucket scheduler does): LpdecSlice names the slice.
#pragma once

#include <map>
#include <vector>

#include "algorithms/gossip/topology.h"
#include "algorithms/quantized/codec.h"
#include "core/comm.h"

namespace bagua {

// count elements of the replicas: this rank's own, its ring neighbours' (by rank), and its error feedback
// (nullptr when off). index_base: the slice's first element in the caller's numbering (stochastic draws).
struct LpdecSlice {
  size_t count = 0;
  float* self = nullptr;
  std::map<int, float*> neighbours;
  float* error = nullptr;
  uint64_t index_base = 0;
};

// The neighbours whose replicas rank keeps (its ring in-neighbours; none on one rank).
std::vector<int> lpdec_neighbours(const Comm& comm);
// Collective: sends self to the ring neighbours and receives theirs (full precision), once at the start.
void lpdec_exchange_initial(Comm& comm, const LpdecSlice& slice);
// Collective: one step of the slice; x (count floats) is the caller's updated weights, replaced by the result.
void lpdec_step(Comm& comm, const Codec& codec, const LpdecSlice& slice, uint64_t step, float* x);

class LowPrecisionDecentralized {
 public:
  // Collective: exchanges the initial weights with the ring neighbours (full precision). device >= 0: initial is
  // device memory there, and so are the replicas, which every step updates with kernels on the object's own
  // stream (after the legacy default stream's earlier work; the step returns once they finish): the same bits as on
  // the host. Throws SYSTEM when out of device memory.
  LowPrecisionDecentralized(Comm& comm, size_t count, const Codec& codec, const float* initial, int device = -1);
  ~LowPrecisionDecentralized();
  LowPrecisionDecentralized(const LowPrecisionDecentralized&) = delete;
  LowPrecisionDecentralized& operator=(const LowPrecisionDecentralized&) = delete;
  // x: memory of the replicas' kind (host, or device memory of their device).
  void step(float* x);
  // which: -1 left neighbour, 0 self, +1 right neighbour; out: host or device memory.
  void copy_replica(int which, float* out) const;
  Comm& comm() { return comm_; }
  size_t count() const { return count_; }
  int device() const { return device_; }

 private:
  LpdecSlice slice();
  int peer_of(int which) const;
  void step_checked(float* x, bool x_on_host, int x_device);  // step's work, its arguments checked
  void step_on_device(float* x);

  Comm& comm_;
  size_t count_;
  Codec codec_;
  std::vector<float> self_;
  std::map<int, std::vector<float>> neighbours_;  // by rank
  std::vector<float> error_;                      // error feedback (empty when off)
  uint64_t steps_ = 0;
  int timeout_ms_;  // the communicator's, kept: the object may outlive it
  // Device replicas: self, neighbours by rank, error feedback, the step's difference and compressed bytes, in one
  // allocation on device_.
  int device_ = -1;
  void* stream_ = nullptr;
  void* device_block_ = nullptr;
  float* device_self_ = nullptr;
  std::map<int, float*> device_neighbours_;
  float* device_error_ = nullptr;
  float* device_diff_ = nullptr;
  float* device_x_ = nullptr;  // a host x's device copy
  uint8_t* device_mine_ = nullptr;
  std::vector<uint8_t*> device_theirs_;  // in the ring plan's receive order
};

}  // namespace bagua

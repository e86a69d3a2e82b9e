// Ring allreduce on host memory: reduce-scatter then allgather around the ring, each step cut into
// segments so that at most `window` segments are in flight and scratch memory stays bounded.
//
// Units: step t in [0, 2(n-1)) times segment j in [0, nseg). Unit (t, j) receives segment j of one chunk
// from the previous rank and sends segment j of another to the next; its send may start once unit
// (t-1, j) is complete, because that is where the data it forwards was reduced (or received).
// The owner of each chunk computes its final value once, so every rank ends bitwise identical.
// Out of place costs nothing extra: step 0 sends from sendbuf and every reduction reads this rank's
// contribution from sendbuf and writes recvbuf (each chunk is received exactly once in reduce-scatter).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "algorithms/staged_steps.h"
#include "core/operation.h"

namespace bagua {

struct RingAllreduceArgs {
  const void* sendbuf;
  void* recvbuf;
  size_t count;
  bagua_datatype_t dtype;
  bagua_redop_t op;
  int rank;
  int nranks;
  uint64_t fingerprint;
  uint64_t unmatched_bits;
  uint64_t sequence;
  size_t segment_bytes = 512 << 10;
  int window = 4;
  int position = -1;  // this rank's place on the ring (-1: its rank)
  int next = -1;      // ring neighbours (-1: rank +- 1)
  int prev = -1;
};

class RingAllreduce : public Operation {
 public:
  RingAllreduce(const RingAllreduceArgs& args, std::string description);
  void advance(Transport& transport) override;
  // Steps: the units, which finish in order.
  bool pipelines_staging() const override { return true; }
  std::string waiting_for() const override;

 private:
  struct Slot {
    Transfer send;
    Transfer recv;
    uint64_t unit = 0;
  };
  struct UnitPlan {
    size_t send_offset, send_count;  // elements into recvbuf
    size_t recv_offset, recv_count;
    bool reduce;       // reduce-scatter step: receive into scratch and reduce
    bool owner_final;  // last reduce-scatter step: this rank's owned chunk is complete
  };

  UnitPlan plan(uint64_t unit) const;
  void post_unit(Transport& transport, uint64_t unit);
  void plan_staging(StagingWindow& window);
  bool complete_unit(Transport& transport, uint64_t unit);

  RingAllreduceArgs args_;
  size_t elem_size_;
  size_t segment_elems_;
  uint64_t segments_;  // per chunk
  uint64_t total_units_;
  uint64_t next_post_ = 0;
  uint64_t head_ = 0;  // first unit not yet complete
  std::vector<Slot> slots_;
  std::unique_ptr<uint8_t[]> scratch_;  // window slots of one segment each, left uninitialized
  size_t slot_elems_ = 0;
  bool started_ = false;
  std::unique_ptr<StagedSteps> staged_;  // on a device call's pipelined staging
  bool awaiting_input_ = false;
};

}  // namespace bagua

// The bucket scheduler's pure parts: how registered tensors fall into buckets, and the online tuner of the
// bucket size and of flat against hierarchical communication. Both are functions of what every rank knows
// alike (the registered counts and dtypes; rank 0's decisions, broadcast), so every rank builds the same buckets.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "bagua/bagua.h"

namespace bagua {

struct TensorSpec {
  size_t count = 0;
  bagua_datatype_t dtype = BAGUA_FLOAT32;
  // The tensor's first element in its dtype's state arrays (tensors of a dtype follow in registration order),
  // where per-tensor state (error-feedback residuals, momentum, replicas) lives whatever the buckets.
  size_t state_offset = 0;
};

// Tensors of one dtype, consecutive among that dtype's tensors in registration order.
struct BucketSpec {
  bagua_datatype_t dtype = BAGUA_FLOAT32;
  std::vector<int> tensors;
  size_t count = 0;
  size_t state_offset = 0;  // of its first tensor
};

// Fills in state_offset of every tensor.
void assign_state_offsets(std::vector<TensorSpec>& tensors);
// Buckets of at most bucket_bytes (a larger tensor gets one of its own), one dtype each, ordered by their first
// tensor's registration index: the order in which every rank starts them.
std::vector<BucketSpec> plan_buckets(const std::vector<TensorSpec>& tensors, size_t bucket_bytes);

// A choice the tuner hands out, and how many steps it holds before the next decision.
struct TuneChoice {
  size_t bucket_bytes = 0;
  bool hierarchical = false;
  bool operator==(const TuneChoice& o) const {
    return bucket_bytes == o.bucket_bytes && hierarchical == o.hierarchical;
  }
};
struct TuneDecision {
  TuneChoice choice;
  int window_steps = 1;  // steps until the next decision
  bool tuning = false;   // still measuring candidates
  bool settled = false;  // the same choice for kSettleDecisions consecutive decisions: no more decisions
};

// Online search, on rank 0, over bucket sizes 2^k in [min_bytes, max_bytes] (and, when try_hierarchy, the other
// flat/hierarchical setting at the best size). Each candidate holds a window of kWindowSteps steps: the first
// (rebucketing, cold buffers) is dropped and the fastest of the rest is its time. From the start it climbs up
// while doublings beat the best by more than kMinGain (one miss forgiven), else down the same way; then the other
// hierarchy. Then it repeats its choice until settled. Settles in about (candidates x 3 + 5) steps.
class BucketTuner {
 public:
  static constexpr int kWindowSteps = 3;
  static constexpr int kSettleDecisions = 5;
  static constexpr double kMinGain = 0.03;
  static constexpr int kPatience = 1;  // candidates in a row that may fail to beat the best before turning back

  BucketTuner(size_t start_bytes, size_t min_bytes, size_t max_bytes, bool start_hierarchical, bool try_hierarchy);
  // The step time (seconds) of a step that ran under the current choice.
  void record(double seconds);
  // The next decision (call at the decision steps only).
  TuneDecision decide();

 private:
  struct Candidate {
    int size_log2;
    bool hierarchical;
  };
  TuneChoice choice_of(const Candidate& c) const;
  double measured() const;
  bool next_candidate(const Candidate& measured_one, double time);

  int min_log2_, max_log2_;
  bool try_hierarchy_;
  bool hierarchy_tried_ = false;
  bool searching_ = true;
  bool started_ = false;
  int direction_ = +1;
  bool moved_up_ = false;
  int misses_ = 0;
  Candidate current_, best_;
  double best_time_ = 0;
  std::vector<double> samples_;
  int same_decisions_ = 0;
  TuneChoice last_choice_;
};

// 2^k for the largest k with 2^k <= bytes (bytes >= 1).
size_t floor_power_of_two(size_t bytes);

}  // namespace bagua

#include "algorithms/scheduler/bucket_plan.h"

#include <algorithm>
#include <map>

#include "kernels/dtype.h"

namespace bagua {

void assign_state_offsets(std::vector<TensorSpec>& tensors) {
  std::map<bagua_datatype_t, size_t> next;
  for (TensorSpec& t : tensors) {
    t.state_offset = next[t.dtype];
    next[t.dtype] += t.count;
  }
}

std::vector<BucketSpec> plan_buckets(const std::vector<TensorSpec>& tensors, size_t bucket_bytes) {
  std::vector<BucketSpec> done;
  std::map<bagua_datatype_t, BucketSpec> open;  // the bucket filling up, per dtype
  for (int i = 0; i < static_cast<int>(tensors.size()); ++i) {
    const TensorSpec& t = tensors[i];
    const size_t elem = datatype_size(t.dtype);
    auto it = open.find(t.dtype);
    if (it != open.end() && !it->second.tensors.empty() && (it->second.count + t.count) * elem > bucket_bytes) {
      done.push_back(std::move(it->second));
      open.erase(it);
      it = open.end();
    }
    if (it == open.end()) {
      BucketSpec b;
      b.dtype = t.dtype;
      b.state_offset = t.state_offset;
      it = open.emplace(t.dtype, std::move(b)).first;
    }
    it->second.tensors.push_back(i);
    it->second.count += t.count;
  }
  for (auto& [dtype, b] : open) done.push_back(std::move(b));
  std::sort(done.begin(), done.end(),
            [](const BucketSpec& a, const BucketSpec& b) { return a.tensors.front() < b.tensors.front(); });
  return done;
}

size_t floor_power_of_two(size_t bytes) {
  size_t p = 1;
  while (p <= bytes / 2) p *= 2;
  return p;
}

namespace {
int log2_of(size_t power) {
  int k = 0;
  while ((size_t{1} << k) < power) ++k;
  return k;
}
}  // namespace

BucketTuner::BucketTuner(size_t start_bytes, size_t min_bytes, size_t max_bytes, bool start_hierarchical,
                         bool try_hierarchy)
    : min_log2_(log2_of(floor_power_of_two(std::max<size_t>(min_bytes, 1)))),
      max_log2_(std::max(min_log2_, log2_of(floor_power_of_two(std::max<size_t>(max_bytes, 1))))),
      try_hierarchy_(try_hierarchy) {
  int start = std::clamp(log2_of(floor_power_of_two(std::max<size_t>(start_bytes, 1))), min_log2_, max_log2_);
  current_ = best_ = {start, start_hierarchical};
}

TuneChoice BucketTuner::choice_of(const Candidate& c) const { return {size_t{1} << c.size_log2, c.hierarchical}; }

void BucketTuner::record(double seconds) {
  if (searching_) samples_.push_back(seconds);
}

double BucketTuner::measured() const { return *std::min_element(samples_.begin() + 1, samples_.end()); }

// After measuring `one` at `time`: the next candidate to try; false when the search is over (best_ holds).
bool BucketTuner::next_candidate(const Candidate& one, double time) {
  const bool first = best_time_ == 0;
  if (first || time < best_time_ * (1 - kMinGain)) {
    if (!first && direction_ > 0) moved_up_ = true;
    best_ = one;
    best_time_ = time;
  }
  if (!hierarchy_tried_) {
    // Climbing in the current direction while candidates beat the best; one that does not is forgiven once
    // (step times are noisy), the next one past it is still tried.
    const bool improved = best_.size_log2 == one.size_log2 && best_.hierarchical == one.hierarchical;
    misses_ = improved ? 0 : misses_ + 1;
    if (misses_ <= kPatience) {
      int next = one.size_log2 + direction_;
      if (next >= min_log2_ && next <= max_log2_) {
        current_ = {next, best_.hierarchical};
        return true;
      }
    }
    if (direction_ > 0 && !moved_up_) {
      direction_ = -1;
      misses_ = 0;
      int next = best_.size_log2 - 1;
      if (next >= min_log2_) {
        current_ = {next, best_.hierarchical};
        return true;
      }
    }
    hierarchy_tried_ = true;
    if (try_hierarchy_) {
      current_ = {best_.size_log2, !best_.hierarchical};
      return true;
    }
  }
  return false;
}

TuneDecision BucketTuner::decide() {
  TuneDecision d;
  if (!started_) {
    started_ = true;
    if (min_log2_ == max_log2_ && !try_hierarchy_) searching_ = false;
  } else if (searching_) {
    if (samples_.size() < 2) {  // not enough steps under this choice yet (skipped steps): hold it longer
      d.choice = choice_of(current_);
      d.window_steps = kWindowSteps;
      d.tuning = true;
      return d;
    }
    double time = measured();
    samples_.clear();
    searching_ = next_candidate(current_, time);
  }
  if (searching_) {
    d.choice = choice_of(current_);
    d.window_steps = kWindowSteps;
    d.tuning = true;
  } else {
    d.choice = choice_of(best_);
    d.window_steps = 1;
  }
  same_decisions_ = (same_decisions_ > 0 && d.choice == last_choice_) ? same_decisions_ + 1 : 1;
  last_choice_ = d.choice;
  d.settled = !d.tuning && same_decisions_ >= kSettleDecisions;
  return d;
}

}  // namespace bagua

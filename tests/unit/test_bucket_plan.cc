// The bucket scheduler's pure parts: bucket plans and the online tuner (against synthetic step-time curves).
#include <catch2/catch.hpp>

#include <cmath>
#include <map>
#include <random>
#include <vector>

#include "algorithms/scheduler/bucket_plan.h"

using namespace bagua;

namespace {
std::vector<TensorSpec> specs(std::vector<std::pair<size_t, bagua_datatype_t>> list) {
  std::vector<TensorSpec> out;
  for (auto& [count, dtype] : list) out.push_back({count, dtype, 0});
  assign_state_offsets(out);
  return out;
}
}  // namespace

TEST_CASE("buckets: one dtype each, at most the size, in registration order", "[bucket_plan]") {
  const auto F = BAGUA_FLOAT32, D = BAGUA_FLOAT64;
  auto t = specs({{100, F}, {50, D}, {200, F}, {0, F}, {1000, F}, {10, D}, {30, F}});
  CHECK(t[2].state_offset == 100);
  CHECK(t[4].state_offset == 300);
  CHECK(t[5].state_offset == 50);
  auto b = plan_buckets(t, 1200);  // 300 floats or 150 doubles
  REQUIRE(b.size() == 4);
  CHECK(b[0].tensors == std::vector<int>{0, 2, 3});  // 300 floats exactly fit
  CHECK(b[0].count == 300);
  CHECK(b[1].tensors == std::vector<int>{1, 5});  // the doubles, by their first tensor
  CHECK(b[1].dtype == D);
  CHECK(b[2].tensors == std::vector<int>{4});  // larger than a bucket: alone
  CHECK(b[2].state_offset == 300);
  CHECK(b[3].tensors == std::vector<int>{6});
  // Every tensor in exactly one bucket, whatever the size.
  for (size_t bytes : {1, 4, 400, 4000, 1 << 20}) {
    std::map<int, int> seen;
    for (auto& bucket : plan_buckets(t, bytes))
      for (int i : bucket.tensors) seen[i]++;
    CHECK(seen.size() == t.size());
    for (auto& [i, n] : seen) CHECK(n == 1);
  }
}

namespace {
// Runs the tuner against step_time(bytes, hierarchical) until it settles; returns its choice and the steps taken.
template <typename F>
TuneChoice tune(BucketTuner& tuner, F step_time, int* steps, bool* settled) {
  TuneDecision d = tuner.decide();
  *steps = 0;
  int next = d.window_steps;
  for (int step = 1; step < 400; ++step) {
    tuner.record(step_time(d.choice));
    if (step == next) {
      d = tuner.decide();
      next = step + d.window_steps;
      if (d.settled) {
        *steps = step;
        *settled = true;
        return d.choice;
      }
    }
  }
  *settled = false;
  return d.choice;
}
}  // namespace

TEST_CASE("tuner: settles in tens of steps within 10% of the best fixed size", "[bucket_plan]") {
  std::mt19937 rng(3);
  std::uniform_real_distribution<double> noise(0.97, 1.03);
  // Convex in log2(size) with the minimum at 2^k: too small costs latency, too large loses overlap.
  for (int best_log2 : {16, 18, 21, 23, 26}) {
    auto curve = [&](const TuneChoice& c) {
      double x = std::log2(static_cast<double>(c.bucket_bytes)) - best_log2;
      return (10.0 + 0.8 * x * x) * (c.hierarchical ? 0.9 : 1.0) * noise(rng);
    };
    BucketTuner tuner(4 << 20, 64 << 10, 256 << 20, true, true);
    int steps = 0;
    bool settled = false;
    TuneChoice choice = tune(tuner, curve, &steps, &settled);
    INFO("best 2^" << best_log2 << ": chose " << choice.bucket_bytes << " after " << steps << " steps");
    CHECK(settled);
    CHECK(steps <= 60);
    double x = std::log2(static_cast<double>(choice.bucket_bytes)) - best_log2;
    CHECK(10.0 + 0.8 * x * x <= 1.10 * 10.0);  // within 10% of the best fixed size
    CHECK(choice.hierarchical);                // 10% faster here
  }
}

TEST_CASE("tuner: one candidate settles at once", "[bucket_plan]") {
  BucketTuner tuner(1 << 20, 64 << 10, 64 << 10, false, false);
  int steps = 0;
  bool settled = false;
  TuneChoice c = tune(
      tuner, [](const TuneChoice&) { return 1.0; }, &steps, &settled);
  CHECK(settled);
  CHECK(c.bucket_bytes == (64u << 10));
  CHECK(steps <= BucketTuner::kSettleDecisions);
}

#include "algorithms/calibration.h"

#include <algorithm>
#include <chrono>
#include <vector>

#include "algorithms/dispatch.h"

namespace bagua {

std::vector<SharedCopyTimes> time_alltoall_copies(Comm& comm) {
  const int n = comm.size();
  if (comm.shared_segments() == nullptr || n < 2) return {};
  const auto per_rank_capped = [n](size_t block, size_t per_rank) {
    return std::max<size_t>(4096, std::min(block, per_rank / static_cast<size_t>(n)));
  };
  // Ranks with cores of their own: 64 KiB blocks, where both algorithms are mostly latency, and 2 MiB blocks
  // (at most 4 MiB per rank), where bytes dominate; the two copies' cost against a single-copy read differed by
  // 2.6x between them on the 2-core VM (docs/algorithms.md). Ranks sharing cores: 256 KiB blocks, within 1 MiB per
  // rank (init time grows with size there, and a rank's calls wait on peers that are not running).
  std::vector<size_t> blocks;
  if (comm.ranks_outnumber_cores())
    blocks = {per_rank_capped(256 << 10, 1 << 20)};
  else
    blocks = {per_rank_capped(2 << 20, 4 << 20), per_rank_capped(64 << 10, 1 << 20)};
  std::vector<float> send, recv;
  auto run = [&](const char* algorithm, size_t count) {
    CollectiveArgs args = args_of(Collective::kAlltoall, send.data(), recv.data(), count, BAGUA_FLOAT32);
    args.algorithm = algorithm;
    auto op = make_collective(comm, args, ", calibration");  // outside the timing: it may write a debug log line
    const auto start = std::chrono::steady_clock::now();
    run_to_completion(comm, *op);
    return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
  };
  // Each algorithm in a run of calls of its own: alternating them, each call also waited for the peers to finish the
  // other algorithm's call, and direct's time came out twice as long in half of the runs. The untimed calls go
  // first (shm alternates two sets of slots, whose pages fault in on first use). Of the timed calls, the fastest
  // two in a row, averaged: where ranks share cores a rank's calls alternate short and long (one that finished early
  // waits in the next call), 270-310 against 870-1170 us for shm on 4 ranks of 2 cores, so the fastest single call
  // made shm look twice as fast as it is. The fastest pair, since a busy machine only ever adds time.
  // Calls of 64 KiB blocks take microseconds, where one late wake-up weighs most: more of them.
  constexpr int kUntimed = 2;
  const auto timed_calls = [](size_t block) { return block <= (64 << 10) ? 16 : 6; };
  const char* const algorithms[2] = {"shm", "direct"};
  int calls = 1;
  for (size_t block : blocks) calls += 2 * (kUntimed + timed_calls(block));
  comm.begin_setup_operations(calls);
  std::vector<double> fastest(2 * blocks.size(), 1e300);
  for (size_t b = 0; b < blocks.size(); ++b) {
    const size_t count = blocks[b] / sizeof(float);
    send.assign(count * static_cast<size_t>(n), 1.0f);
    recv.assign(send.size(), 0.0f);
    for (int a = 0; a < 2; ++a) {
      for (int i = 0; i < kUntimed; ++i) run(algorithms[a], count);
      double previous = run(algorithms[a], count);
      for (int i = 1; i < timed_calls(blocks[b]); ++i) {
        const double now = run(algorithms[a], count);
        fastest[2 * b + a] = std::min(fastest[2 * b + a], (previous + now) / 2);
        previous = now;
      }
    }
  }
  // The slowest rank's, on every rank.
  allreduce_now(comm, fastest.data(), fastest.data(), fastest.size(), BAGUA_FLOAT64, BAGUA_MAX);
  comm.forget_setup_operations();
  std::vector<SharedCopyTimes> times;
  for (size_t b = 0; b < blocks.size(); ++b) times.push_back({blocks[b], fastest[2 * b], fastest[2 * b + 1]});
  return times;
}

bool measured_factor_decides(double factor) { return factor >= 1.1 && factor <= 4.0; }

CostModel::SharedCopyFactor shared_copy_curve(const std::vector<SharedCopyTimes>& points) {
  const double offline = CostModel::SharedCopyFactor{}.at_small;
  if (points.empty()) return {};
  const auto factor_of = [offline](const SharedCopyTimes& p) {
    return p.measured() && measured_factor_decides(p.factor()) ? p.factor() : offline;
  };
  const auto [small, large] = std::minmax_element(
      points.begin(), points.end(), [](const auto& a, const auto& b) { return a.block_bytes < b.block_bytes; });
  return {static_cast<double>(small->block_bytes), factor_of(*small), static_cast<double>(large->block_bytes),
          factor_of(*large)};
}

}  // namespace bagua

#include "algorithms/calibration.h"

#include <algorithm>
#include <chrono>
#include <vector>

#include "algorithms/dispatch.h"

namespace bagua {

SharedCopyTimes time_alltoall_copies(Comm& comm) {
  const int n = comm.size();
  if (comm.shared_segments() == nullptr || n < 2) return {};
  // Blocks of 256 KiB, where bytes dominate both algorithms' time, within 1 MiB per rank in all (init time grows
  // with it where ranks outnumber cores).
  const size_t block = std::max<size_t>(4096, std::min<size_t>(256 << 10, (1 << 20) / static_cast<size_t>(n)));
  const size_t count = block / sizeof(float);
  std::vector<float> send(count * static_cast<size_t>(n), 1.0f), recv(send.size(), 0.0f);
  auto run = [&](const char* algorithm) {
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
  constexpr int kUntimed = 2, kTimed = 6;
  const char* const algorithms[2] = {"shm", "direct"};
  comm.begin_setup_operations(2 * (kUntimed + kTimed) + 1);
  double fastest[2] = {1e300, 1e300};
  for (int a = 0; a < 2; ++a) {
    for (int i = 0; i < kUntimed; ++i) run(algorithms[a]);
    double previous = run(algorithms[a]);
    for (int i = 1; i < kTimed; ++i) {
      const double now = run(algorithms[a]);
      fastest[a] = std::min(fastest[a], (previous + now) / 2);
      previous = now;
    }
  }
  allreduce_now(comm, fastest, fastest, 2, BAGUA_FLOAT64, BAGUA_MAX);  // the slowest rank's, on every rank
  comm.forget_setup_operations();
  return {fastest[0], fastest[1]};
}

bool measured_factor_decides(double factor) { return factor >= 1.1 && factor <= 4.0; }

}  // namespace bagua

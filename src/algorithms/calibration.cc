#include "algorithms/calibration.h"

#include <algorithm>
#include <chrono>
#include <vector>

#include "algorithms/dispatch.h"

namespace bagua {

double measure_shared_copy_factor(Comm& comm) {
  const int n = comm.size();
  if (comm.shared_segments() == nullptr || n < 2) return 0.0;
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
  // Untimed calls first: shm alternates two sets of slots, whose pages fault in on first use. Then alternating
  // timed calls, and of each algorithm the fastest: a busy machine only ever adds time.
  constexpr int kUntimed = 2, kTimed = 5;
  comm.begin_setup_operations(2 * (kUntimed + kTimed) + 1);
  for (int i = 0; i < kUntimed; ++i) run("shm"), run("direct");
  double fastest[2] = {1e300, 1e300};  // shm, direct
  for (int i = 0; i < kTimed; ++i) {
    fastest[0] = std::min(fastest[0], run("shm"));
    fastest[1] = std::min(fastest[1], run("direct"));
  }
  allreduce_now(comm, fastest, fastest, 2, BAGUA_FLOAT64, BAGUA_MAX);  // the slowest rank's, on every rank
  comm.forget_setup_operations();
  return fastest[0] / fastest[1];
}

}  // namespace bagua

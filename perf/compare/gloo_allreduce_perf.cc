// The same sweep with Gloo: ring allreduce over TCP loopback, float sum, in place. Launch with bagua-run
// (it reads BAGUA_RANK and BAGUA_WORLD_SIZE; rendezvous through a FileStore in $GLOO_STORE_DIR).
// Prints "size time_us busbw_GBps" per size. Arguments: [min_bytes max_bytes factor iterations [written]]; written = 1
// writes the input before every call and times the calls alone (bagua's -W 1).
#include <gloo/allreduce_ring.h>
#include <gloo/barrier_all_to_one.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/transport/tcp/device.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

int main(int argc, char** argv) {
  int rank = std::atoi(std::getenv("BAGUA_RANK"));
  int size = std::atoi(std::getenv("BAGUA_WORLD_SIZE"));
  size_t min_bytes = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 4096;
  size_t max_bytes = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 64u << 20;
  int factor = argc > 3 ? std::atoi(argv[3]) : 4;
  int iters = argc > 4 ? std::atoi(argv[4]) : 20;
  bool written = argc > 5 && std::atoi(argv[5]) != 0;
  gloo::transport::tcp::attr attr;
  attr.hostname = "127.0.0.1";
  auto device = gloo::transport::tcp::CreateDevice(attr);
  gloo::rendezvous::FileStore store(std::getenv("GLOO_STORE_DIR"));
  auto context = std::make_shared<gloo::rendezvous::Context>(rank, size);
  context->connectFullMesh(store, device);
  std::vector<float> buf(max_bytes / sizeof(float), 1.0f);
  for (size_t bytes = min_bytes; bytes <= max_bytes; bytes *= factor) {
    int count = static_cast<int>(bytes / sizeof(float));
    gloo::AllreduceRing<float> allreduce(context, {buf.data()}, count);
    for (int i = 0; i < 3; ++i) allreduce.run();
    gloo::BarrierAllToOne(context).run();
    double us = 0;
    if (written) {
      for (int i = 0; i < iters; ++i) {
        std::memset(buf.data(), 0x3e + (i & 1), bytes);
        auto start = std::chrono::steady_clock::now();
        allreduce.run();
        us += std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
      }
      us /= iters;
    } else {
      auto start = std::chrono::steady_clock::now();
      for (int i = 0; i < iters; ++i) allreduce.run();
      us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count() / iters;
    }
    std::vector<double> worst = {us};
    gloo::AllreduceRing<double>(context, {worst.data()}, 1, gloo::ReductionFunction<double>::max).run();
    double busbw = static_cast<double>(bytes) / (worst[0] / 1e6) / 1e9 * 2.0 * (size - 1) / size;
    if (rank == 0) std::printf("%zu %.2f %.3f\n", bytes, worst[0], busbw);
  }
  return 0;
}

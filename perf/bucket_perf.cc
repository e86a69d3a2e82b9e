// The bucket scheduler on a synthetic layer stack: BERT-base's 199 tensors (embeddings, 12 encoder layers of 16
// tensors, pooler), every dimension scaled by --scale (default 1/6: 3.3M parameters, 13 MiB of fp32 gradients).
// Backward is simulated by sleeping --ns-per-param per parameter of each tensor, last layer first, so compute
// takes no CPU from communication (4 ranks share 2 cores on the test bed). Rank 0 prints one table:
//   overlap      the scheduler, buckets of --bucket-mb, each tensor marked as backward produces it
//   no-overlap   the same buckets, every tensor marked after backward (communication after compute)
//   per-tensor   after backward, one bagua_allreduce per tensor (what a hand-written trainer does first)
//   sweep        overlap at each fixed bucket size 2^k from 64 KiB (the tuner's smallest) to the whole model
//   autotune     the scheduler's tuner from its default start, until it settles; then --steps more steps
// Step times are the medians over --steps steps of the slowest rank. Run on the test bed:
//   scripts/netns-cluster.sh run --hosts 4 --ranks-per-host 1 --rate 1gbit -- build/bin/bagua_bucket_perf
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "bagua/bagua.h"

namespace {

using Clock = std::chrono::steady_clock;

void check(bagua_status_t s, const char* what) {
  if (s == BAGUA_SUCCESS) return;
  std::fprintf(stderr, "bagua_bucket_perf: %s failed: %s\n", what, bagua_get_last_error(nullptr));
  std::exit(1);
}
#define CHECK(call) check((call), #call)

struct Options {
  double scale = 1.0 / 6;
  double ns_per_param = 30;
  double bucket_mb = 4;
  int steps = 8;
};

// BERT-base's parameter shapes in backward order (pooler, layers 11..0, embeddings), dimensions scaled.
std::vector<size_t> bert_tensors(double scale) {
  auto d = [&](double x) { return static_cast<size_t>(std::max(1.0, std::round(x * scale))); };
  const size_t h = d(768), ff = d(3072), vocab = d(30522), positions = d(512);
  std::vector<size_t> t = {h * h, h};  // pooler
  for (int layer = 11; layer >= 0; --layer) {
    for (size_t s : {h, h, ff * h, h, h * ff, ff, h, h, h * h, h, h * h, h, h * h, h, h * h, h}) t.push_back(s);
  }
  for (size_t s : {h, h, 2 * h, positions * h, vocab * h}) t.push_back(s);  // layer norm, token type, positions, words
  return t;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct Bench {
  bagua_comm_t comm;
  int rank, n;
  Options o;
  std::vector<size_t> counts;
  std::vector<std::vector<float>> grads;
  std::vector<void*> ptrs;

  void backward_tensor(size_t t) {
    std::this_thread::sleep_for(std::chrono::nanoseconds(static_cast<int64_t>(o.ns_per_param * counts[t])));
    float* g = grads[t].data();
    for (size_t i = 0; i < counts[t]; i += 1024) g[i] = static_cast<float>(i % 7);
  }
  double slowest(double seconds) {
    CHECK(bagua_allreduce(&seconds, &seconds, 1, BAGUA_FLOAT64, BAGUA_MAX, comm, nullptr));
    return seconds;
  }
  bagua_scheduler_t scheduler(size_t bucket_bytes, int autotune) {
    bagua_scheduler_config_t cfg = BAGUA_SCHEDULER_CONFIG_INITIALIZER;
    cfg.algorithm = BAGUA_BUCKET_ALLREDUCE;
    cfg.bucket_bytes = bucket_bytes;
    cfg.autotune = autotune;
    bagua_scheduler_t s;
    CHECK(bagua_scheduler_create(comm, &cfg, &s));
    std::vector<bagua_datatype_t> dtypes(counts.size(), BAGUA_FLOAT32);
    CHECK(bagua_scheduler_register(s, static_cast<int>(counts.size()), ptrs.data(), counts.data(), dtypes.data()));
    return s;
  }
  // One step with the scheduler; overlap: mark each tensor as backward produces it.
  double scheduler_step(bagua_scheduler_t s, bool overlap) {
    CHECK(bagua_barrier(comm, nullptr));
    auto t0 = Clock::now();
    for (size_t t = 0; t < counts.size(); ++t) {
      backward_tensor(t);
      if (overlap) CHECK(bagua_scheduler_mark_ready(s, static_cast<int>(t), nullptr));
    }
    if (!overlap)
      for (size_t t = 0; t < counts.size(); ++t) CHECK(bagua_scheduler_mark_ready(s, static_cast<int>(t), nullptr));
    CHECK(bagua_scheduler_wait(s, nullptr));
    return slowest(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  double per_tensor_step() {
    CHECK(bagua_barrier(comm, nullptr));
    auto t0 = Clock::now();
    for (size_t t = 0; t < counts.size(); ++t) backward_tensor(t);
    for (size_t t = 0; t < counts.size(); ++t)
      CHECK(bagua_allreduce(ptrs[t], ptrs[t], counts[t], BAGUA_FLOAT32, BAGUA_AVG, comm, nullptr));
    return slowest(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  double compute_only_step() {
    CHECK(bagua_barrier(comm, nullptr));
    auto t0 = Clock::now();
    for (size_t t = 0; t < counts.size(); ++t) backward_tensor(t);
    return slowest(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  double fixed(size_t bucket_bytes, bool overlap) {
    bagua_scheduler_t s = scheduler(bucket_bytes, 0);
    scheduler_step(s, overlap);  // warm
    std::vector<double> v;
    for (int i = 0; i < o.steps; ++i) v.push_back(scheduler_step(s, overlap));
    CHECK(bagua_scheduler_destroy(s));
    return median(v);
  }
};

}  // namespace

int main(int argc, char** argv) {
  Bench b;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (i + 1 >= argc) {
      std::fprintf(stderr, "usage: bagua_bucket_perf [--scale X] [--ns-per-param X] [--bucket-mb M] [--steps N]\n");
      return 2;
    }
    double v = std::atof(argv[++i]);
    if (a == "--scale")
      b.o.scale = v;
    else if (a == "--ns-per-param")
      b.o.ns_per_param = v;
    else if (a == "--bucket-mb")
      b.o.bucket_mb = v;
    else if (a == "--steps")
      b.o.steps = std::max(1, static_cast<int>(v));
    else {
      std::fprintf(stderr, "bagua_bucket_perf: unknown option %s\n", a.c_str());
      return 2;
    }
  }
  CHECK(bagua_comm_init_from_env(&b.comm));
  CHECK(bagua_comm_rank(b.comm, &b.rank));
  CHECK(bagua_comm_size(b.comm, &b.n));
  b.counts = bert_tensors(b.o.scale);
  size_t params = 0;
  for (size_t c : b.counts) {
    b.grads.emplace_back(c, 1.0f);
    params += c;
  }
  for (auto& g : b.grads) b.ptrs.push_back(g.data());
  const bool root = b.rank == 0;
  if (root)
    std::printf("# bagua_bucket_perf: %zu tensors, %zu parameters (%.1f MiB fp32), %d ranks, backward %.0f ns/param\n",
                b.counts.size(), params, params * 4.0 / (1 << 20), b.n, b.o.ns_per_param);
  std::vector<double> v;
  for (int i = 0; i < b.o.steps; ++i) v.push_back(b.compute_only_step());
  const double compute = median(v);
  v.clear();
  b.per_tensor_step();
  for (int i = 0; i < b.o.steps; ++i) v.push_back(b.per_tensor_step());
  const double per_tensor = median(v);
  const size_t bucket = static_cast<size_t>(b.o.bucket_mb * (1 << 20));
  const double overlap = b.fixed(bucket, true), no_overlap = b.fixed(bucket, false);
  if (root) {
    std::printf("%-28s %10s %10s\n", "mode", "step_ms", "vs_overlap");
    std::printf("%-28s %10.1f %10s\n", "compute only", 1e3 * compute, "");
    std::printf("%-28s %10.1f %9.2fx\n", "per-tensor allreduce", 1e3 * per_tensor, per_tensor / overlap);
    std::printf("%-28s %10.1f %9.2fx\n", ("no-overlap, " + std::to_string(bucket >> 10) + " KiB").c_str(),
                1e3 * no_overlap, no_overlap / overlap);
    std::printf("%-28s %10.1f %9.2fx\n", ("overlap, " + std::to_string(bucket >> 10) + " KiB").c_str(), 1e3 * overlap,
                1.0);
  }
  // Sweep of fixed sizes.
  double best = 1e30;
  size_t best_bytes = 0;
  for (size_t bytes = 64 << 10;; bytes *= 2) {
    double t = b.fixed(bytes, true);
    if (root)
      std::printf("%-28s %10.1f %9.2fx\n", ("sweep, " + std::to_string(bytes >> 10) + " KiB").c_str(), 1e3 * t,
                  t / overlap);
    if (t < best) best = t, best_bytes = bytes;
    if (bytes >= params * 4) break;
  }
  // Autotune from the default start.
  bagua_scheduler_t s = b.scheduler(0, 1);
  bagua_scheduler_info_t info;
  info.size = sizeof info;
  int step = 0;
  for (; step < 200; ++step) {
    b.scheduler_step(s, true);
    CHECK(bagua_scheduler_get_info(s, &info));
    if (info.settled) break;
  }
  v.clear();
  for (int i = 0; i < b.o.steps; ++i) v.push_back(b.scheduler_step(s, true));
  const double tuned = median(v);
  if (root) {
    std::printf(
        "%-28s %10.1f %9.2fx\n",
        ("autotune, " + std::to_string(info.bucket_bytes >> 10) + " KiB" + (info.hierarchical ? " hier" : "")).c_str(),
        1e3 * tuned, tuned / overlap);
    std::printf(
        "autotune settled after %d steps (%llu decisions) at %llu KiB; best fixed size %zu KiB; tuned/best "
        "fixed = %.3f\n",
        step + 1, static_cast<unsigned long long>(info.decisions),
        static_cast<unsigned long long>(info.bucket_bytes >> 10), best_bytes >> 10, tuned / best);
  }
  CHECK(bagua_scheduler_destroy(s));
  CHECK(bagua_comm_destroy(b.comm));
  return 0;
}

// Under bagua-run -n N: the bucket scheduler (bagua_scheduler_*).
//   orders   every algorithm: marks in registration, reverse and random order give bit-identical tensors
//            (and, for the gradient algorithms, the same tensors on every rank)
//   exact    full precision on integer-valued inputs of mixed dtypes (contiguous and scattered tensors, zero-size
//            ones, one larger than a bucket), autotuning on: equal, element for element, to one bagua_allreduce per
//            tensor at every step
//   unused   tensors marked unused count as zeros; a skipped step changes nothing and communicates nothing
//   resize   a bucket-size change mid-training: error feedback telescopes across it (oracle below), and QAdam's
//            momentum ends bit-identical to a run that had the new size from the start
//   errors   layout or settings mismatch, double and unknown marks, unmarked tensors at wait, bad config: clear
//            statuses
//   overlap  with simulated compute (sleeps) between marks, the buckets go while compute runs: the step takes at
//            most the compute plus half of the communication alone, and the time after the last mark at most half
//   failure  a rank leaves mid-step: the others' wait returns the communicator's error within the timeout
//   tune     autotuning settles, and every rank used the same bucket size and hierarchy at every step
//   latency  (the default BAGUA_QUANTIZED_MIN_BYTES; the other modes quantize at every size) quantized buckets
//            that shrink below the full-precision size: the residuals are sent and zeroed, error feedback
//            telescopes across the switch
//   device   (BAGUA_DEVICE_STANDIN=1, or a GPU) every algorithm on device tensors gives bit for bit what it gives
//            on host tensors, read after every step on the stream passed to wait (which returns at once: the
//            stream waits); a tensor is read only after the event it was marked with (a slow writer on another
//            stream), or after the legacy default stream's earlier work when marked without one; set_bucket_bytes,
//            residual and destroy right after a device wait, while the step before still runs
//   blocked  (the stand-in with blocking copies) a pageable copy right after a device wait returns once the step is
//            done, with exact results: the scheduler's thread makes no runtime call
#include <unistd.h>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "common/exact_data.h"
#include "kernels/device_runtime.h"
#include "kernels/dtype.h"
#include "mp/mp_check.h"

using namespace bagua::testing;

namespace {
int g_rank, g_size;
using Clock = std::chrono::steady_clock;

size_t elem_size(bagua_datatype_t t) { return bagua::datatype_size(t); }

// Registered tensors: the first `contiguous` lie back to back in one arena (communicated in place), the rest
// each in its own allocation (copied into bucket buffers).
struct Model {
  std::vector<size_t> counts;
  std::vector<bagua_datatype_t> dtypes;
  std::vector<uint8_t> arena;
  std::vector<std::vector<uint8_t>> own;
  std::vector<void*> ptrs;

  Model(std::vector<size_t> c, std::vector<bagua_datatype_t> d, size_t contiguous) : counts(c), dtypes(d) {
    size_t arena_bytes = 0;
    for (size_t i = 0; i < contiguous; ++i) arena_bytes += counts[i] * elem_size(dtypes[i]);
    arena.resize(arena_bytes + 1);
    own.resize(counts.size());
    size_t offset = 0;
    for (size_t i = 0; i < counts.size(); ++i) {
      size_t bytes = counts[i] * elem_size(dtypes[i]);
      if (i < contiguous) {
        ptrs.push_back(arena.data() + offset);
        offset += bytes;
      } else {
        own[i].resize(bytes + 64);
        ptrs.push_back(own[i].data() + 8);  // not adjacent to anything
      }
    }
  }
  int size() const { return static_cast<int>(counts.size()); }
  size_t bytes(int t) const { return counts[t] * elem_size(dtypes[t]); }
  float* f32(int t) { return static_cast<float*>(ptrs[t]); }
  uint64_t hash() const {
    uint64_t h = 0;
    for (int t = 0; t < size(); ++t) h = h * 31 + fnv1a(ptrs[t], bytes(t));
    return h;
  }
};

// Small integers (quarters for floats): every sum and average below is exact.
double value_of(int rank, int step, int tensor, size_t i, bagua_datatype_t t) {
  long long v = static_cast<long long>((rank * 7 + step * 3 + tensor * 5 + i * 11) % 17) - 8;
  if (t == BAGUA_UINT8 || t == BAGUA_UINT32 || t == BAGUA_UINT64) v += 8;
  bool is_float = t == BAGUA_FLOAT16 || t == BAGUA_BFLOAT16 || t == BAGUA_FLOAT32 || t == BAGUA_FLOAT64;
  return is_float ? v * 0.25 : static_cast<double>(v);
}

void fill(Model& m, int rank, int step) {
  for (int t = 0; t < m.size(); ++t)
    for (size_t i = 0; i < m.counts[t]; ++i)
      store_value(m.ptrs[t], i, m.dtypes[t], value_of(rank, step, t, i, m.dtypes[t]));
}

bagua_scheduler_t make_scheduler(bagua_comm_t comm, Model& m, int algorithm, size_t bucket_bytes, int autotune,
                                 const bagua_compression_t* compression = nullptr, int op = BAGUA_AVG, int warmup = 2) {
  bagua_scheduler_config_t cfg = BAGUA_SCHEDULER_CONFIG_INITIALIZER;
  cfg.algorithm = algorithm;
  cfg.op = op;
  cfg.bucket_bytes = bucket_bytes;
  cfg.autotune = autotune;
  cfg.compression = compression;
  cfg.warmup_steps = warmup;
  cfg.topology = BAGUA_TOPO_RING;
  bagua_scheduler_t s = nullptr;
  MP_OK(bagua_scheduler_create(comm, &cfg, &s));
  MP_OK(bagua_scheduler_register(s, m.size(), m.ptrs.data(), m.counts.data(), m.dtypes.data()));
  return s;
}

std::vector<int> mark_order(int n, int kind, int step) {
  std::vector<int> order(n);
  std::iota(order.begin(), order.end(), 0);
  if (kind == 1) std::reverse(order.begin(), order.end());
  if (kind == 2) {
    std::mt19937 rng(1000 * g_rank + step);
    std::shuffle(order.begin(), order.end(), rng);
  }
  return order;
}

bool same_on_all_ranks(uint64_t h, bagua_comm_t comm) {
  uint64_t lo = h, hi = h;
  MP_OK(bagua_allreduce(&lo, &lo, 1, BAGUA_UINT64, BAGUA_MIN, comm, nullptr));
  MP_OK(bagua_allreduce(&hi, &hi, 1, BAGUA_UINT64, BAGUA_MAX, comm, nullptr));
  return lo == hi;
}

// ---- orders ----
int orders(bagua_comm_t comm) {
  const bagua_datatype_t F = BAGUA_FLOAT32;
  struct Case {
    const char* name;
    int algorithm;
    std::vector<bagua_datatype_t> dtypes;
  };
  std::vector<Case> cases = {
      {"allreduce", BAGUA_BUCKET_ALLREDUCE, {F, BAGUA_INT32, F, BAGUA_FLOAT64, BAGUA_FLOAT16, F, BAGUA_INT32, F}},
      {"quantized", BAGUA_BUCKET_QUANTIZED, {F, F, BAGUA_FLOAT16, F, F, BAGUA_FLOAT16, F, F}},
      {"onebit", BAGUA_BUCKET_ONEBIT, {F, F, F, F, F, F, F, F}},
      {"qadam", BAGUA_BUCKET_QADAM, {F, F, F, F, F, F, F, F}},
      {"decentralized", BAGUA_BUCKET_DECENTRALIZED, {F, BAGUA_FLOAT64, F, F, BAGUA_FLOAT64, F, F, F}},
      {"lpdec", BAGUA_BUCKET_LOW_PRECISION_DECENTRALIZED, {F, F, F, F, F, F, F, F}},
  };
  const std::vector<size_t> counts = {3000, 0, 25000, 700, 40000, 5, 9000, 1200};
  bagua_compression_t ef = BAGUA_COMPRESSION_INITIALIZER;
  ef.error_feedback = 1;
  ef.chunk = 256;
  for (const Case& c : cases) {
    uint64_t hashes[3];
    for (int kind = 0; kind < 3; ++kind) {
      Model m(counts, c.dtypes, 4);
      const bool weights = c.algorithm >= BAGUA_BUCKET_DECENTRALIZED;
      if (weights) fill(m, g_rank, 0);
      bagua_scheduler_t s = make_scheduler(comm, m, c.algorithm, 64 << 10, 0, &ef);
      for (int step = 0; step < 5; ++step) {
        if (!weights) {
          fill(m, g_rank, step);
        } else {  // a local update of the weights
          for (int t = 0; t < m.size(); ++t)
            if (m.dtypes[t] == BAGUA_FLOAT32)
              for (size_t i = 0; i < m.counts[t]; ++i)
                m.f32(t)[i] -= 0.125f * static_cast<float>(value_of(g_rank, step, t, i, F));
        }
        for (int t : mark_order(m.size(), kind, step)) MP_OK(bagua_scheduler_mark_ready(s, t, nullptr));
        MP_OK(bagua_scheduler_wait(s, nullptr));
      }
      hashes[kind] = m.hash();
      if (!weights) MP_CHECK(same_on_all_ranks(hashes[kind], comm));
      bagua_scheduler_info_t info;
      info.size = sizeof info;
      MP_OK(bagua_scheduler_get_info(s, &info));
      MP_CHECK(info.steps == 5 && info.bucket_bytes == (64u << 10) && info.buckets >= 3);
      MP_OK(bagua_scheduler_destroy(s));
    }
    if (g_rank == 0)
      std::printf("orders %-14s %016llx %016llx %016llx\n", c.name, (unsigned long long)hashes[0],
                  (unsigned long long)hashes[1], (unsigned long long)hashes[2]);
    MP_CHECK(hashes[0] == hashes[1] && hashes[0] == hashes[2]);
  }
  return 0;
}

// ---- exact ----
int exact(bagua_comm_t comm) {
  const std::vector<bagua_datatype_t> dtypes = {BAGUA_FLOAT32,  BAGUA_INT32,   BAGUA_FLOAT32, BAGUA_FLOAT64,
                                                BAGUA_FLOAT16,  BAGUA_FLOAT32, BAGUA_INT64,   BAGUA_FLOAT32,
                                                BAGUA_BFLOAT16, BAGUA_UINT8,   BAGUA_FLOAT32};
  // Tensor 4 holds 600 KiB (larger than the smallest bucket sizes the tuner tries); tensors 1 and 8 are empty.
  const std::vector<size_t> counts = {1000, 0, 70000, 3000, 300000, 17, 4096, 100000, 0, 333, 50000};
  for (int op : {BAGUA_SUM, BAGUA_AVG}) {
    Model m(counts, dtypes, 5), ref(counts, dtypes, 0);
    bagua_scheduler_t s = make_scheduler(comm, m, BAGUA_BUCKET_ALLREDUCE, 64 << 10, 1, nullptr, op);
    std::vector<uint64_t> sizes_seen;
    for (int step = 0; step < 40; ++step) {
      fill(m, g_rank, step);
      fill(ref, g_rank, step);
      for (int t : mark_order(m.size(), 2, step)) MP_OK(bagua_scheduler_mark_ready(s, t, nullptr));
      MP_OK(bagua_scheduler_wait(s, nullptr));
      for (int t = 0; t < ref.size(); ++t)
        MP_OK(bagua_allreduce(ref.ptrs[t], ref.ptrs[t], ref.counts[t], ref.dtypes[t], static_cast<bagua_redop_t>(op),
                              comm, nullptr));
      for (int t = 0; t < m.size(); ++t)
        if (std::memcmp(m.ptrs[t], ref.ptrs[t], m.bytes(t)) != 0) {
          std::fprintf(stderr, "rank %d step %d: tensor %d differs from bagua_allreduce\n", g_rank, step, t);
          return 1;
        }
      bagua_scheduler_info_t info;
      info.size = sizeof info;
      MP_OK(bagua_scheduler_get_info(s, &info));
      if (sizes_seen.empty() || sizes_seen.back() != info.bucket_bytes) sizes_seen.push_back(info.bucket_bytes);
    }
    if (g_rank == 0) {
      std::printf("exact %s: 40 steps equal to bagua_allreduce per tensor; bucket sizes used:",
                  op == BAGUA_SUM ? "sum" : "avg");
      for (uint64_t b : sizes_seen) std::printf(" %llu", (unsigned long long)b);
      std::printf("\n");
    }
    MP_CHECK(sizes_seen.size() >= 2);  // the tuner rebucketed at least once, and stayed exact
    MP_OK(bagua_scheduler_destroy(s));
  }
  return 0;
}

// ---- unused tensors and skipped steps ----
int unused(bagua_comm_t comm) {
  const std::vector<size_t> counts = {500, 2000, 80, 30000, 7};
  const std::vector<bagua_datatype_t> dtypes(counts.size(), BAGUA_FLOAT32);
  Model m(counts, dtypes, 3);
  bagua_scheduler_t s = make_scheduler(comm, m, BAGUA_BUCKET_ALLREDUCE, 8 << 10, 0, nullptr, BAGUA_SUM);
  for (int step = 0; step < 6; ++step) {
    fill(m, g_rank, step);
    // Rank r leaves tensor (r + step) % 5 out; the whole bucket holding it still runs.
    const int skipped_tensor = (g_rank + step) % m.size();
    for (int t = m.size() - 1; t >= 0; --t) {
      if (t == skipped_tensor)
        MP_OK(bagua_scheduler_mark_unused(s, t));
      else
        MP_OK(bagua_scheduler_mark_ready(s, t, nullptr));
    }
    MP_OK(bagua_scheduler_wait(s, nullptr));
    for (int t = 0; t < m.size(); ++t)
      for (size_t i = 0; i < m.counts[t]; ++i) {
        double want = 0;
        for (int r = 0; r < g_size; ++r)
          if ((r + step) % m.size() != t) want += value_of(r, step, t, i, BAGUA_FLOAT32);
        if (m.f32(t)[i] != static_cast<float>(want)) {
          std::fprintf(stderr, "rank %d step %d tensor %d [%zu]: %g, want %g\n", g_rank, step, t, i, m.f32(t)[i], want);
          return 1;
        }
      }
    // A skipped step (gradient accumulation): nothing moves, nothing is sent.
    bagua_stats_t before, after;
    before.size = after.size = sizeof before;
    MP_OK(bagua_comm_get_stats(comm, &before));
    fill(m, g_rank, 100 + step);
    uint64_t h = m.hash();
    MP_OK(bagua_scheduler_skip_step(s));
    MP_CHECK(bagua_scheduler_mark_ready(s, 0, nullptr) == BAGUA_ERR_INVALID_USAGE);
    MP_OK(bagua_scheduler_wait(s, nullptr));
    MP_CHECK(m.hash() == h);
    bagua_scheduler_info_t info;
    info.size = sizeof info;
    MP_OK(bagua_scheduler_get_info(s, &info));
    MP_CHECK(info.steps == static_cast<uint64_t>(step + 1));
    MP_OK(bagua_comm_get_stats(comm, &after));
    MP_CHECK(after.bytes_sent == before.bytes_sent);
  }
  MP_OK(bagua_scheduler_destroy(s));
  if (g_rank == 0)
    std::printf("unused: 6 steps with a tensor left out per rank, each followed by a skipped step: ok\n");
  return 0;
}

// ---- resize ----
// Oracle for error feedback (SUM, min-max 8 bit, nearest): what compression loses stays in the residuals, so over
// T steps  sum_t out_t + sum_ranks residual_T = sum_t sum_ranks x_t  per element, up to fp32 rounding
// (bound: 1e-5 x T x n x max|x|). A re-bucketing that dropped or misplaced residuals breaks it by a
// quantization step (~range / 255), far above the bound.
int resize(bagua_comm_t comm) {
  const std::vector<size_t> counts = {20000, 3000, 50000, 9000, 30000};
  const std::vector<bagua_datatype_t> dtypes(counts.size(), BAGUA_FLOAT32);
  bagua_compression_t ef = BAGUA_COMPRESSION_INITIALIZER;
  ef.error_feedback = 1;
  ef.chunk = 256;
  const int steps = 12;
  Model m(counts, dtypes, 2);
  bagua_scheduler_t s = make_scheduler(comm, m, BAGUA_BUCKET_QUANTIZED, 64 << 10, 0, &ef, BAGUA_SUM);
  std::vector<std::vector<double>> out_sum(m.size()), in_sum(m.size());
  for (int t = 0; t < m.size(); ++t) out_sum[t].assign(m.counts[t], 0.0), in_sum[t].assign(m.counts[t], 0.0);
  std::mt19937 rng(77);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  double max_abs = 0;
  for (int step = 0; step < steps; ++step) {
    if (step == 4) MP_OK(bagua_scheduler_set_bucket_bytes(s, 256 << 10));
    if (step == 8) MP_OK(bagua_scheduler_set_bucket_bytes(s, 16 << 10));
    for (int t = 0; t < m.size(); ++t)
      for (size_t i = 0; i < m.counts[t]; ++i) {
        float mine = 0;
        for (int r = 0; r < g_size; ++r) {  // every rank's input, to know the exact sum
          float x = u(rng) * (1 + (i / 500 + r) % 4);
          in_sum[t][i] += x;
          max_abs = std::max(max_abs, static_cast<double>(std::fabs(x)));
          if (r == g_rank) mine = x;
        }
        m.f32(t)[i] = mine;
      }
    for (int t : mark_order(m.size(), 2, step)) MP_OK(bagua_scheduler_mark_ready(s, t, nullptr));
    MP_OK(bagua_scheduler_wait(s, nullptr));
    for (int t = 0; t < m.size(); ++t)
      for (size_t i = 0; i < m.counts[t]; ++i) out_sum[t][i] += m.f32(t)[i];
    if (step == 3) {  // something is owed before the first change, or the test proves nothing
      std::vector<float> r(m.counts[2]);
      MP_OK(bagua_scheduler_residual(s, 2, r.data(), r.size()));
      MP_CHECK(std::any_of(r.begin(), r.end(), [](float v) { return std::fabs(v) > 1e-4f; }));
    }
  }
  bagua_scheduler_info_t info;
  info.size = sizeof info;
  MP_OK(bagua_scheduler_get_info(s, &info));
  MP_CHECK(info.bucket_bytes == (16u << 10) && info.steps == static_cast<uint64_t>(steps));
  const double bound = 1e-5 * steps * g_size * max_abs;
  double worst = 0;
  for (int t = 0; t < m.size(); ++t) {
    std::vector<float> res(m.counts[t]);
    MP_OK(bagua_scheduler_residual(s, t, res.data(), res.size()));
    std::vector<double> total(res.begin(), res.end());
    MP_OK(bagua_allreduce(total.data(), total.data(), total.size(), BAGUA_FLOAT64, BAGUA_SUM, comm, nullptr));
    for (size_t i = 0; i < total.size(); ++i)
      worst = std::max(worst, std::fabs(out_sum[t][i] + total[i] - in_sum[t][i]));
  }
  if (g_rank == 0)
    std::printf(
        "resize: error feedback across 64K -> 256K -> 16K buckets: worst |sum out + residuals - sum in| = %.3g "
        "(bound %.3g)\n",
        worst, bound);
  MP_CHECK(worst <= bound);
  MP_OK(bagua_scheduler_destroy(s));

  // QAdam's momentum (warm-up: exact averages) is per tensor: after a change from 16K to 64K buckets at step 3 it
  // is bit-identical to a run with 64K buckets from the start.
  uint64_t hashes[2];
  for (int run = 0; run < 2; ++run) {
    Model q(counts, dtypes, 3);
    bagua_scheduler_t qs =
        make_scheduler(comm, q, BAGUA_BUCKET_QADAM, run == 0 ? 16 << 10 : 64 << 10, 0, nullptr, BAGUA_AVG, 100);
    for (int step = 0; step < 6; ++step) {
      if (run == 0 && step == 3) MP_OK(bagua_scheduler_set_bucket_bytes(qs, 64 << 10));
      fill(q, g_rank, step);
      for (int t = 0; t < q.size(); ++t) MP_OK(bagua_scheduler_mark_ready(qs, t, nullptr));
      MP_OK(bagua_scheduler_wait(qs, nullptr));
    }
    hashes[run] = q.hash();
    MP_OK(bagua_scheduler_destroy(qs));
  }
  MP_CHECK(hashes[0] == hashes[1]);
  if (g_rank == 0) std::printf("resize: QAdam warm-up averages identical across a bucket change: ok\n");
  return 0;
}

// ---- errors ----
#define EXPECT_STATUS(call, status)                                                                        \
  do {                                                                                                     \
    bagua_status_t got_ = (call);                                                                          \
    if (got_ != (status)) {                                                                                \
      std::fprintf(stderr, "%s:%d: %s returned %s, want %s (%s)\n", __FILE__, __LINE__, #call,             \
                   bagua_status_string(got_), bagua_status_string(status), bagua_get_last_error(nullptr)); \
      std::exit(1);                                                                                        \
    }                                                                                                      \
  } while (0)

int errors(bagua_comm_t comm) {
  // Bad configurations: nothing is created.
  bagua_scheduler_t s = nullptr;
  bagua_scheduler_config_t cfg = BAGUA_SCHEDULER_CONFIG_INITIALIZER;
  EXPECT_STATUS(bagua_scheduler_create(comm, nullptr, &s), BAGUA_ERR_INVALID_ARGUMENT);
  cfg.algorithm = 17;
  EXPECT_STATUS(bagua_scheduler_create(comm, &cfg, &s), BAGUA_ERR_INVALID_ARGUMENT);
  MP_CHECK(std::strstr(bagua_get_last_error(nullptr), "algorithm") != nullptr);
  cfg = BAGUA_SCHEDULER_CONFIG_INITIALIZER;
  cfg.op = BAGUA_MAX;
  EXPECT_STATUS(bagua_scheduler_create(comm, &cfg, &s), BAGUA_ERR_INVALID_ARGUMENT);
  cfg = BAGUA_SCHEDULER_CONFIG_INITIALIZER;
  cfg.magic = 1;
  EXPECT_STATUS(bagua_scheduler_create(comm, &cfg, &s), BAGUA_ERR_INVALID_ARGUMENT);
  MP_CHECK(s == nullptr);

  // A layout that differs on the last rank at tensor 2: INVALID_USAGE on every rank, naming tensor 2.
  std::vector<size_t> counts = {100, 200, 300, 400};
  std::vector<bagua_datatype_t> dtypes(4, BAGUA_FLOAT32);
  Model m(counts, dtypes, 2);
  cfg = BAGUA_SCHEDULER_CONFIG_INITIALIZER;
  MP_OK(bagua_scheduler_create(comm, &cfg, &s));
  std::vector<size_t> mine = counts;
  if (g_rank == g_size - 1 && g_size > 1) mine[2] = 301;
  if (g_size > 1) {
    EXPECT_STATUS(bagua_scheduler_register(s, 4, m.ptrs.data(), mine.data(), dtypes.data()), BAGUA_ERR_INVALID_USAGE);
    MP_CHECK(std::strstr(bagua_get_last_error(nullptr), "tensor 2 differs") != nullptr);
    if (g_rank == 0) std::printf("errors: layout mismatch: %s\n", bagua_get_last_error(nullptr));
    MP_OK(bagua_scheduler_destroy(s));
    MP_OK(bagua_scheduler_create(comm, &cfg, &s));
  }
  // Settings that differ across ranks (the bucket size, with tuning off): refused at registration on every rank.
  if (g_size > 1) {
    bagua_scheduler_config_t other = BAGUA_SCHEDULER_CONFIG_INITIALIZER;
    other.autotune = 0;
    other.bucket_bytes = g_rank == 0 ? (1 << 20) : (2 << 20);
    bagua_scheduler_t t = nullptr;
    MP_OK(bagua_scheduler_create(comm, &other, &t));
    EXPECT_STATUS(bagua_scheduler_register(t, 4, m.ptrs.data(), counts.data(), dtypes.data()), BAGUA_ERR_INVALID_USAGE);
    MP_CHECK(std::strstr(bagua_get_last_error(nullptr), "bucket_bytes differs across ranks") != nullptr);
    if (g_rank == 0) std::printf("errors: settings mismatch: %s\n", bagua_get_last_error(nullptr));
    MP_OK(bagua_scheduler_destroy(t));
  }
  // Bad tensors: NULL with a count, an overflowing count, a dtype the algorithm does not take.
  void* null_ptrs[1] = {nullptr};
  size_t one[1] = {1}, huge[1] = {SIZE_MAX / 2};
  bagua_datatype_t f32[1] = {BAGUA_FLOAT32}, bad[1] = {static_cast<bagua_datatype_t>(99)};
  EXPECT_STATUS(bagua_scheduler_register(s, 1, null_ptrs, one, f32), BAGUA_ERR_INVALID_ARGUMENT);
  EXPECT_STATUS(bagua_scheduler_register(s, 1, m.ptrs.data(), huge, f32), BAGUA_ERR_INVALID_ARGUMENT);
  EXPECT_STATUS(bagua_scheduler_register(s, 1, m.ptrs.data(), one, bad), BAGUA_ERR_INVALID_ARGUMENT);
  EXPECT_STATUS(bagua_scheduler_register(s, 0, m.ptrs.data(), one, f32), BAGUA_ERR_INVALID_ARGUMENT);
  EXPECT_STATUS(bagua_scheduler_mark_ready(s, 0, nullptr), BAGUA_ERR_INVALID_USAGE);  // not registered yet
  MP_OK(bagua_scheduler_register(s, 4, m.ptrs.data(), counts.data(), dtypes.data()));
  EXPECT_STATUS(bagua_scheduler_register(s, 4, m.ptrs.data(), counts.data(), dtypes.data()), BAGUA_ERR_INVALID_USAGE);

  fill(m, g_rank, 0);
  EXPECT_STATUS(bagua_scheduler_mark_ready(s, 4, nullptr), BAGUA_ERR_INVALID_USAGE);
  MP_CHECK(std::strstr(bagua_get_last_error(nullptr), "tensor 4 is not registered") != nullptr);
  EXPECT_STATUS(bagua_scheduler_mark_ready(s, -1, nullptr), BAGUA_ERR_INVALID_USAGE);
  int dummy_event = 0;
  EXPECT_STATUS(bagua_scheduler_mark_ready(s, 0, &dummy_event), BAGUA_ERR_INVALID_ARGUMENT);
  MP_OK(bagua_scheduler_mark_ready(s, 1, nullptr));
  EXPECT_STATUS(bagua_scheduler_mark_ready(s, 1, nullptr), BAGUA_ERR_INVALID_USAGE);
  MP_CHECK(std::strstr(bagua_get_last_error(nullptr), "already marked") != nullptr);
  EXPECT_STATUS(bagua_scheduler_mark_unused(s, 1), BAGUA_ERR_INVALID_USAGE);
  EXPECT_STATUS(bagua_scheduler_skip_step(s), BAGUA_ERR_INVALID_USAGE);
  EXPECT_STATUS(bagua_scheduler_set_bucket_bytes(s, 1 << 20), BAGUA_ERR_INVALID_USAGE);
  EXPECT_STATUS(bagua_scheduler_destroy(s), BAGUA_ERR_INVALID_USAGE);        // step in flight: the handle stays
  EXPECT_STATUS(bagua_scheduler_wait(s, nullptr), BAGUA_ERR_INVALID_USAGE);  // tensors 0, 2, 3 unmarked
  MP_CHECK(std::strstr(bagua_get_last_error(nullptr), "tensor 0 was neither") != nullptr);
  for (int t : {0, 2, 3}) MP_OK(bagua_scheduler_mark_ready(s, t, nullptr));
  MP_OK(bagua_scheduler_wait(s, nullptr));  // the step still completes correctly
  for (size_t i = 0; i < counts[3]; ++i) {
    double want = 0;
    for (int r = 0; r < g_size; ++r) want += value_of(r, 0, 3, i, BAGUA_FLOAT32);
    MP_CHECK(m.f32(3)[i] == static_cast<float>(want / g_size));
  }
  // A step the thread has finished before wait: its calls are refused (they would reach the next step's slot).
  for (int t = 0; t < 4; ++t) MP_OK(bagua_scheduler_mark_ready(s, t, nullptr));
  {
    bagua_scheduler_info_t done;
    done.size = sizeof done;
    auto deadline = Clock::now() + std::chrono::seconds(20);
    do {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      MP_OK(bagua_scheduler_get_info(s, &done));
    } while (done.steps < 2 && Clock::now() < deadline);
    MP_CHECK(done.steps == 2);
  }
  EXPECT_STATUS(bagua_scheduler_mark_ready(s, 0, nullptr), BAGUA_ERR_INVALID_USAGE);
  MP_CHECK(std::strstr(bagua_get_last_error(nullptr), "call wait first") != nullptr);
  EXPECT_STATUS(bagua_scheduler_skip_step(s), BAGUA_ERR_INVALID_USAGE);
  EXPECT_STATUS(bagua_scheduler_set_bucket_bytes(s, 1 << 20), BAGUA_ERR_INVALID_USAGE);
  MP_OK(bagua_scheduler_wait(s, nullptr));
  EXPECT_STATUS(bagua_scheduler_set_bucket_bytes(s, 0), BAGUA_ERR_INVALID_ARGUMENT);
  bagua_scheduler_info_t info;
  info.size = 8;
  EXPECT_STATUS(bagua_scheduler_get_info(s, &info), BAGUA_ERR_INVALID_ARGUMENT);
  std::vector<float> r(5);
  EXPECT_STATUS(bagua_scheduler_residual(s, 0, r.data(), 5), BAGUA_ERR_INVALID_ARGUMENT);
  MP_OK(bagua_scheduler_destroy(s));

  // The weight algorithms have no unused tensors.
  cfg.algorithm = BAGUA_BUCKET_DECENTRALIZED;
  MP_OK(bagua_scheduler_create(comm, &cfg, &s));
  MP_OK(bagua_scheduler_register(s, 4, m.ptrs.data(), counts.data(), dtypes.data()));
  EXPECT_STATUS(bagua_scheduler_mark_unused(s, 0), BAGUA_ERR_INVALID_USAGE);
  MP_OK(bagua_scheduler_destroy(s));
  // QADAM takes FLOAT32 only.
  cfg.algorithm = BAGUA_BUCKET_QADAM;
  MP_OK(bagua_scheduler_create(comm, &cfg, &s));
  bagua_datatype_t f64[1] = {BAGUA_FLOAT64};
  EXPECT_STATUS(bagua_scheduler_register(s, 1, m.ptrs.data(), one, f64), BAGUA_ERR_INVALID_ARGUMENT);
  MP_OK(bagua_scheduler_destroy(s));
  EXPECT_STATUS(bagua_scheduler_wait(nullptr, nullptr), BAGUA_ERR_INVALID_ARGUMENT);
  if (g_rank == 0) std::printf("errors: ok\n");
  return 0;
}

// ---- overlap ----
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Overlap is judged with compute between the marks twice as long as communicating the whole step. Every bucket but
// the last has then gone by the last mark, so the tail (last mark to the end of wait) is about one bucket's time,
// 1/16 of the step's communication, and the step takes the compute plus that. A scheduler that communicates only at
// wait, or after the last mark, has a tail of the whole communication; one that communicates inside mark_ready makes
// the step compute plus all of it. The bounds (half the communication over the compute, and for the tail) leave a
// margin of several times on either side, so a loaded machine or a sanitizer does not decide the result.
int overlap(bagua_comm_t comm) {
  const int tensors = 16;
  std::vector<size_t> counts(tensors, 1 << 20);  // 4 MiB each
  std::vector<bagua_datatype_t> dtypes(tensors, BAGUA_FLOAT32);
  Model m(counts, dtypes, 0);
  bagua_scheduler_t s = make_scheduler(comm, m, BAGUA_BUCKET_ALLREDUCE, 4 << 20, 0);
  auto slowest = [&](double seconds) {
    MP_OK(bagua_allreduce(&seconds, &seconds, 1, BAGUA_FLOAT64, BAGUA_MAX, comm, nullptr));
    return seconds;
  };
  struct StepTimes {
    double whole, tail;
  };
  auto step = [&](double compute_per_tensor_s) {
    MP_OK(bagua_barrier(comm, nullptr));
    auto t0 = Clock::now(), last_mark = t0;
    for (int t = 0; t < tensors; ++t) {  // in registration order, as backward produces them
      if (compute_per_tensor_s > 0) std::this_thread::sleep_for(std::chrono::duration<double>(compute_per_tensor_s));
      last_mark = Clock::now();
      MP_OK(bagua_scheduler_mark_ready(s, t, nullptr));
    }
    MP_OK(bagua_scheduler_wait(s, nullptr));
    double tail = mp_seconds_since(last_mark), whole = mp_seconds_since(t0);
    return StepTimes{slowest(whole), slowest(tail)};
  };
  for (int i = 0; i < 2; ++i) step(0);  // warm
  std::vector<double> comm_only, tails, wholes;
  for (int i = 0; i < 5; ++i) comm_only.push_back(step(0).whole);
  const double c = median(comm_only);
  for (int i = 0; i < 5; ++i) {
    StepTimes st = step(2 * c / tensors);
    tails.push_back(st.tail);
    wholes.push_back(st.whole);
  }
  // The sleeps themselves, measured: what compute alone takes on this machine.
  auto t0 = Clock::now();
  for (int t = 0; t < tensors; ++t) std::this_thread::sleep_for(std::chrono::duration<double>(2 * c / tensors));
  const double compute = slowest(mp_seconds_since(t0)), tail = median(tails), whole = median(wholes);
  if (g_rank == 0)
    std::printf(
        "overlap: communication alone %.2f ms; with %.2f ms of compute the step took %.2f ms, of which %.2f ms "
        "after the last mark (%.2fx of the communication; bounds: the step <= compute + 0.5x, the tail <= 0.5x)\n",
        1e3 * c, 1e3 * compute, 1e3 * whole, 1e3 * tail, tail / c);
  // A short tail alone would also pass a scheduler whose mark_ready communicates before it returns: the step as a
  // whole must hide the communication too.
  MP_CHECK(whole <= compute + 0.5 * c);
  MP_CHECK(tail <= 0.5 * c);
  MP_OK(bagua_scheduler_destroy(s));
  return 0;
}

// ---- failure ---- (run with BAGUA_TIMEOUT=4 on 3 ranks)
int failure(bagua_comm_t comm) {
  std::vector<size_t> counts(6, 1 << 18);
  std::vector<bagua_datatype_t> dtypes(6, BAGUA_FLOAT32);
  Model m(counts, dtypes, 0);
  bagua_scheduler_t s = make_scheduler(comm, m, BAGUA_BUCKET_ALLREDUCE, 1 << 20, 0);
  fill(m, g_rank, 0);
  for (int t = 0; t < m.size(); ++t) MP_OK(bagua_scheduler_mark_ready(s, t, nullptr));
  MP_OK(bagua_scheduler_wait(s, nullptr));
  if (g_rank == 1) {  // marks half, then leaves while its first buckets are in flight
    for (int t = 0; t < 3; ++t) MP_OK(bagua_scheduler_mark_ready(s, t, nullptr));
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    std::printf("rank 1: leaving mid-step\n");
    std::fflush(stdout);
    _exit(0);
  }
  auto t0 = Clock::now();
  for (int t = 0; t < m.size(); ++t) MP_OK(bagua_scheduler_mark_ready(s, t, nullptr));
  bagua_status_t st = bagua_scheduler_wait(s, nullptr);
  double took = mp_seconds_since(t0);
  std::string message = bagua_get_last_error(nullptr);
  std::printf("rank %d: wait returned %s after %.2f s: %s\n", g_rank, bagua_status_string(st), took, message.c_str());
  MP_CHECK(st == BAGUA_ERR_REMOTE || st == BAGUA_ERR_TIMEOUT);
  MP_CHECK(took < 4.0 + 3.0);
  MP_CHECK(message.find("bagua_scheduler_wait") != std::string::npos);
  // Every later call says the same, and destroy works.
  MP_CHECK(bagua_scheduler_mark_ready(s, 0, nullptr) == st);
  MP_OK(bagua_scheduler_destroy(s));
  return 0;
}

// ---- tune ---- (the test bed: several hosts; simulated compute between marks)
int tune(bagua_comm_t comm) {
  const int tensors = 24;
  std::vector<size_t> counts(tensors, 64 << 10);  // 256 KiB each, 6 MiB in all
  std::vector<bagua_datatype_t> dtypes(tensors, BAGUA_FLOAT32);
  Model m(counts, dtypes, tensors / 2);
  bagua_scheduler_t s = make_scheduler(comm, m, BAGUA_BUCKET_ALLREDUCE, 0, 1);
  const int max_steps = 80;
  std::vector<uint64_t> record;  // per step: bucket bytes, hierarchical
  int settled_at = -1;
  for (int step = 0; step < max_steps; ++step) {
    fill(m, g_rank, step);
    for (int t = 0; t < tensors; ++t) {
      std::this_thread::sleep_for(std::chrono::microseconds(500));
      MP_OK(bagua_scheduler_mark_ready(s, t, nullptr));
    }
    MP_OK(bagua_scheduler_wait(s, nullptr));
    bagua_scheduler_info_t info;
    info.size = sizeof info;
    MP_OK(bagua_scheduler_get_info(s, &info));
    record.push_back(info.bucket_bytes);
    record.push_back(static_cast<uint64_t>(info.hierarchical));
    if (info.settled && settled_at < 0) settled_at = step;
    if (g_rank == 0 && (step < 3 || info.decisions > 0) && step % 4 == 0)
      std::printf("tune step %2d: %8llu bytes, %s, %.2f ms%s\n", step, (unsigned long long)info.bucket_bytes,
                  info.hierarchical ? "hierarchical" : "flat", info.step_ms, info.settled ? ", settled" : "");
    if (settled_at >= 0 && step >= settled_at + 5) break;
  }
  uint64_t h = fnv1a(record.data(), record.size() * sizeof(uint64_t));
  MP_CHECK(same_on_all_ranks(h, comm));
  if (g_rank == 0) std::printf("tune: settled at step %d; every rank used the same choice at each step\n", settled_at);
  MP_CHECK(settled_at >= 0 && settled_at <= 60);
  MP_OK(bagua_scheduler_destroy(s));
  return 0;
}

// Run with BAGUA_DEVICE_STANDIN=1, BAGUA_STANDIN_BLOCKING_COPIES=1, BAGUA_STANDIN_COPY_US=200000, BAGUA_TIMEOUT=2.
// Each rank reads a tensor back with a copy to pageable memory right after the device wait, as a training loop does
// (loss.item()): that copy holds the stand-in's driver lock until the stream passes the wait and the copies back.
// The scheduler's thread makes no runtime call, so the step completes: each step's results are exact, and the read
// returns after the step's copies (about 1 s of 200 ms copies), well before BAGUA_TIMEOUT. (With the thread making
// the copies, as before, it stalled until a monitor released it with TIMEOUT.)
int blocked(bagua_comm_t comm) {
  bagua::DeviceRuntime& rt = bagua::device_runtime();
  if (!rt.usable()) {
    std::printf("blocked: no device here, skipped\n");
    return 77;
  }
  const char* blocking = std::getenv("BAGUA_STANDIN_BLOCKING_COPIES");
  if (bagua::standin_control() != nullptr && (blocking == nullptr || std::strcmp(blocking, "1") != 0)) {
    // Without the driver's behaviour the read below would not wait, and the stream would write freed memory.
    std::printf("blocked: the stand-in needs BAGUA_STANDIN_BLOCKING_COPIES=1, skipped\n");
    return 77;
  }
  const std::vector<size_t> counts = {4096, 4096};
  const std::vector<bagua_datatype_t> dtypes(counts.size(), BAGUA_FLOAT32);
  void* stream = rt.create_stream(0);
  std::vector<void*> dev(counts.size());
  for (size_t t = 0; t < counts.size(); ++t) dev[t] = rt.alloc_device(counts[t] * sizeof(float), 0);
  bagua_scheduler_config_t cfg = BAGUA_SCHEDULER_CONFIG_INITIALIZER;
  cfg.algorithm = BAGUA_BUCKET_ALLREDUCE;
  cfg.op = BAGUA_AVG;
  cfg.bucket_bytes = 64 << 10;
  cfg.autotune = 0;
  bagua_scheduler_t s = nullptr;
  MP_OK(bagua_scheduler_create(comm, &cfg, &s));
  MP_OK(bagua_scheduler_register(s, static_cast<int>(dev.size()), dev.data(), counts.data(), dtypes.data()));
  int nranks = 0;
  MP_OK(bagua_comm_size(comm, &nranks));
  for (int step = 0; step < 3; ++step) {
    // Tensor t of rank r holds (r + 1) (t + 1) (step + 1): the average, (n + 1) / 2 (t + 1) (step + 1), is exact.
    std::vector<float> host(counts[0]);
    for (size_t t = 0; t < counts.size(); ++t) {
      std::fill(host.begin(), host.end(), static_cast<float>((g_rank + 1) * (t + 1) * (step + 1)));
      rt.copy_async(dev[t], host.data(), counts[t] * sizeof(float), stream);  // pageable: done when it returns
      MP_OK(bagua_scheduler_mark_ready(s, static_cast<int>(t), nullptr));
    }
    MP_OK(bagua_scheduler_wait(s, stream));
    const auto start = Clock::now();
    std::vector<float> back(counts[0], -1.0f);
    rt.copy_async(back.data(), dev[0], counts[0] * sizeof(float), stream);  // pageable: waits, holding the lock
    const double read = mp_seconds_since(start);
    rt.copy_async(host.data(), dev[1], counts[1] * sizeof(float), stream);
    const float want0 = (nranks + 1) / 2.0f * (step + 1), want1 = 2 * want0;
    const bool exact = std::all_of(back.begin(), back.end(), [&](float v) { return v == want0; }) &&
                       std::all_of(host.begin(), host.end(), [&](float v) { return v == want1; });
    std::printf("blocked: rank %d step %d: the read after wait returned after %.2f s; results %s\n", g_rank, step, read,
                exact ? "exact" : "WRONG");
    MP_CHECK(exact);
    MP_CHECK(read < 1.9);  // below BAGUA_TIMEOUT: nothing was released by a timeout
  }
  MP_OK(bagua_scheduler_destroy(s));
  for (void* p : dev) rt.free_device(p);
  return 0;
}

// ---- device ----
int device(bagua_comm_t comm) {
  bagua::DeviceRuntime& rt = bagua::device_runtime();
  bagua::StandinControl* standin = bagua::standin_control();
  if (!rt.usable()) {
    std::printf("device: no device here, skipped\n");
    return 77;
  }
  const bagua_datatype_t F = BAGUA_FLOAT32;
  const std::vector<size_t> counts = {3000, 0, 25000, 700, 40000, 5, 9000};
  bagua_compression_t ef = BAGUA_COMPRESSION_INITIALIZER;
  ef.error_feedback = 1;
  ef.chunk = 256;
  void* writer = rt.create_stream(0);  // the "backward" of the device run
  for (int algorithm = BAGUA_BUCKET_ALLREDUCE; algorithm <= BAGUA_BUCKET_LOW_PRECISION_DECENTRALIZED; ++algorithm) {
    const std::vector<bagua_datatype_t> dtypes(counts.size(), F);
    const bool weights = algorithm >= BAGUA_BUCKET_DECENTRALIZED;
    // Host run.
    Model host(counts, dtypes, 3);
    if (weights) fill(host, g_rank, 0);
    bagua_scheduler_t hs = make_scheduler(comm, host, algorithm, 64 << 10, 0, &ef);
    // Device run: the same tensors in device memory.
    Model staged(counts, dtypes, 0);  // host images of the device tensors
    std::vector<void*> dev(counts.size());
    if (weights) fill(staged, g_rank, 0);  // once: the copies below read it on `writer` meanwhile
    for (size_t t = 0; t < counts.size(); ++t) {
      dev[t] = rt.alloc_device(std::max<size_t>(1, staged.bytes(t)), 0);
      if (weights) rt.copy_async(dev[t], staged.ptrs[t], staged.bytes(t), writer);
    }
    rt.synchronize(writer, 10000);
    bagua_scheduler_config_t cfg = BAGUA_SCHEDULER_CONFIG_INITIALIZER;
    cfg.algorithm = algorithm;
    cfg.bucket_bytes = 64 << 10;
    cfg.autotune = 0;
    cfg.compression = &ef;
    cfg.warmup_steps = 2;
    cfg.topology = BAGUA_TOPO_RING;
    bagua_scheduler_t ds = nullptr;
    MP_OK(bagua_scheduler_create(comm, &cfg, &ds));
    MP_OK(bagua_scheduler_register(ds, static_cast<int>(dev.size()), dev.data(), counts.data(), dtypes.data()));
    for (int step = 0; step < 4; ++step) {
      // Host: as in `orders`.
      if (!weights) {
        fill(host, g_rank, step);
      } else {
        for (int t = 0; t < host.size(); ++t)
          for (size_t i = 0; i < host.counts[t]; ++i)
            host.f32(t)[i] -= 0.125f * static_cast<float>(value_of(g_rank, step, t, i, F));
      }
      for (int t = 0; t < host.size(); ++t) MP_OK(bagua_scheduler_mark_ready(hs, t, nullptr));
      MP_OK(bagua_scheduler_wait(hs, nullptr));
      // Device: each tensor written late by a task on `writer` (on the stand-in; on a GPU by a copy), marked
      // with an event on it for even tensors, and for odd ones after the copy lands on the legacy stream.
      for (int t = 0; t < host.size(); ++t) {
        const size_t bytes = staged.bytes(t);
        if (!weights) {
          fill(staged, g_rank, step);
        } else {  // the device weights after the previous step (ordered after its wait), updated the same way
          rt.copy_async(staged.ptrs[t], dev[t], bytes, nullptr);
          rt.synchronize(nullptr, 10000);
          for (size_t i = 0; i < staged.counts[t]; ++i)
            staged.f32(t)[i] -= 0.125f * static_cast<float>(value_of(g_rank, step, t, i, F));
        }
        if (standin != nullptr && bytes > 0) {
          void* target = dev[t];
          const void* source = staged.ptrs[t];
          void* on = (t % 2 == 0) ? writer : nullptr;
          standin->run_on_stream(on, [target, source, bytes] {
            std::this_thread::sleep_for(std::chrono::milliseconds(3));
            std::memcpy(target, source, bytes);
          });
          if (t % 2 == 0)
            MP_OK(bagua_scheduler_mark_ready(ds, t, standin->record_user_event(writer)));
          else
            MP_OK(bagua_scheduler_mark_ready(ds, t, nullptr));
          rt.synchronize(on, 10000);  // (the staged image is reused for the next tensor)
        } else {
          rt.copy_async(dev[t], staged.ptrs[t], bytes, nullptr);
          MP_OK(bagua_scheduler_mark_ready(ds, t, nullptr));
          rt.synchronize(nullptr, 10000);
        }
      }
      // Stream-ordered: a copy enqueued on the waited stream right after wait sees the step's results.
      MP_OK(bagua_scheduler_wait(ds, nullptr));
      for (int t = 0; t < host.size(); ++t) {
        std::vector<uint8_t> got(staged.bytes(t));
        rt.copy_async(got.data(), dev[t], got.size(), nullptr);
        rt.synchronize(nullptr, 10000);
        if (std::memcmp(got.data(), host.ptrs[t], got.size()) != 0) {
          std::fprintf(stderr, "rank %d algorithm %d step %d: device tensor %d differs from the host run\n", g_rank,
                       algorithm, step, t);
          return 1;
        }
      }
    }
    // The error-feedback residuals (zeros where the algorithm keeps none) are the same bits, read into host memory
    // and into device memory (bagua_scheduler_residual writes either).
    for (int t = 0; t < host.size(); ++t) {
      if (dtypes[t] != BAGUA_FLOAT32 || host.counts[t] == 0) continue;
      const size_t n = host.counts[t];
      std::vector<float> from_host(n, -1.0f), from_device(n, -1.0f), through_device(n, -1.0f);
      MP_OK(bagua_scheduler_residual(hs, t, from_host.data(), n));
      MP_OK(bagua_scheduler_residual(ds, t, from_device.data(), n));
      void* residual = rt.alloc_device(n * sizeof(float), 0);
      MP_OK(bagua_scheduler_residual(ds, t, static_cast<float*>(residual), n));
      rt.copy_async(through_device.data(), residual, n * sizeof(float), nullptr);
      rt.synchronize(nullptr, 10000);
      rt.free_device(residual);
      MP_CHECK(std::memcmp(from_host.data(), from_device.data(), n * sizeof(float)) == 0);
      MP_CHECK(std::memcmp(from_host.data(), through_device.data(), n * sizeof(float)) == 0);
    }
    MP_OK(bagua_scheduler_destroy(hs));
    MP_OK(bagua_scheduler_destroy(ds));
    for (void* p : dev) rt.free_device(p);
    if (g_rank == 0) std::printf("device: algorithm %d on device tensors equals the host run bit for bit\n", algorithm);
  }
  // Right after a device wait the step before may still run (its stream work, or ranks behind): set_bucket_bytes,
  // residual and destroy wait for it instead of refusing. The last rank holds step 0 back while the others mark
  // step 1 and call them at once.
  {
    const std::vector<size_t> c2 = {5000, 7000};
    const std::vector<bagua_datatype_t> d2(2, F);
    Model zeros(c2, d2, 0);
    std::vector<void*> d(2);
    for (int t = 0; t < 2; ++t) {
      d[t] = rt.alloc_device(zeros.bytes(t), 0);
      rt.copy_async(d[t], zeros.ptrs[t], zeros.bytes(t), nullptr);
    }
    rt.synchronize(nullptr, 10000);
    bagua_scheduler_config_t c = BAGUA_SCHEDULER_CONFIG_INITIALIZER;
    c.algorithm = BAGUA_BUCKET_QUANTIZED;
    c.bucket_bytes = 64 << 10;
    c.autotune = 0;
    c.compression = &ef;
    bagua_scheduler_t s = nullptr;
    MP_OK(bagua_scheduler_create(comm, &c, &s));
    MP_OK(bagua_scheduler_register(s, 2, d.data(), c2.data(), d2.data()));
    for (int step = 0; step < 2; ++step) {
      if (step == 0 && g_rank == g_size - 1) std::this_thread::sleep_for(std::chrono::milliseconds(300));
      for (int t = 0; t < 2; ++t) MP_OK(bagua_scheduler_mark_ready(s, t, nullptr));
      MP_OK(bagua_scheduler_wait(s, nullptr));
    }
    MP_OK(bagua_scheduler_set_bucket_bytes(s, 32 << 10));
    std::vector<float> residual(c2[0]);
    MP_OK(bagua_scheduler_residual(s, 0, residual.data(), residual.size()));
    MP_OK(bagua_scheduler_destroy(s));
    rt.synchronize(nullptr, 10000);
    for (void* p : d) rt.free_device(p);
    if (g_rank == 0) std::printf("device: set_bucket_bytes, residual and destroy right after a device wait\n");
  }
  // Host and device tensors in one registration: refused.
  std::vector<size_t> two = {16, 16};
  std::vector<bagua_datatype_t> f2(2, F);
  Model h(two, f2, 0);
  void* mixed[2] = {h.ptrs[0], rt.alloc_device(64, 0)};
  bagua_scheduler_config_t cfg = BAGUA_SCHEDULER_CONFIG_INITIALIZER;
  bagua_scheduler_t s;
  MP_OK(bagua_scheduler_create(comm, &cfg, &s));
  MP_CHECK(bagua_scheduler_register(s, 2, mixed, two.data(), f2.data()) == BAGUA_ERR_INVALID_ARGUMENT);
  MP_OK(bagua_scheduler_destroy(s));
  rt.free_device(mixed[1]);
  return 0;
}

// ---- latency ----
// Two tensors (800 KB and 400 KB) in one 4 MiB bucket are quantized (1.2 MB >= 1 MiB within a host); in 64 KiB
// buckets each is its own bucket below 1 MiB and goes at full precision. Across logical hosts (BAGUA_HOST_ID set)
// the size is 32 KiB: 24 KB and 12 KB tensors, 16 KiB buckets after (the hierarchical rail form before, with its
// per-slice owners). Oracle: the first full-precision step
// sends input + residual, so the residuals are then exactly zero and sum_t out_t = sum_t sum_ranks x_t per element
// up to fp32 rounding (bound 1e-5 x T x n x max|x|). (mp_quantized latency checks the stats.)
int latency(bagua_comm_t comm) {
  const bool hosts = std::getenv("BAGUA_HOST_ID") != nullptr;
  const std::vector<size_t> counts = hosts ? std::vector<size_t>{6000, 3000} : std::vector<size_t>{200000, 100000};
  const std::vector<bagua_datatype_t> dtypes(counts.size(), BAGUA_FLOAT32);
  bagua_compression_t ef = BAGUA_COMPRESSION_INITIALIZER;
  ef.error_feedback = 1;
  ef.bits = 4;
  Model m(counts, dtypes, 2);
  bagua_scheduler_t s = make_scheduler(comm, m, BAGUA_BUCKET_QUANTIZED, 4 << 20, 0, &ef, BAGUA_SUM);
  std::vector<std::vector<double>> out_sum(m.size()), in_sum(m.size());
  for (int t = 0; t < m.size(); ++t) out_sum[t].assign(m.counts[t], 0.0), in_sum[t].assign(m.counts[t], 0.0);
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  const int steps = 6;
  for (int step = 0; step < steps; ++step) {
    if (step == 3) {
      std::vector<float> r(m.counts[0]);
      MP_OK(bagua_scheduler_residual(s, 0, r.data(), r.size()));
      MP_CHECK(std::any_of(r.begin(), r.end(), [](float v) { return std::fabs(v) > 1e-4f; }));  // owed
      MP_OK(bagua_scheduler_set_bucket_bytes(s, hosts ? 16 << 10 : 64 << 10));
    }
    for (int t = 0; t < m.size(); ++t)
      for (size_t i = 0; i < m.counts[t]; ++i) {
        float mine = 0;
        for (int r = 0; r < g_size; ++r) {
          float x = u(rng) * (1 + (i / 700 + r) % 3);
          in_sum[t][i] += x;
          if (r == g_rank) mine = x;
        }
        m.f32(t)[i] = mine;
      }
    for (int t = 0; t < m.size(); ++t) MP_OK(bagua_scheduler_mark_ready(s, t, nullptr));
    MP_OK(bagua_scheduler_wait(s, nullptr));
    for (int t = 0; t < m.size(); ++t)
      for (size_t i = 0; i < m.counts[t]; ++i) out_sum[t][i] += m.f32(t)[i];
  }
  double worst = 0;
  for (int t = 0; t < m.size(); ++t) {
    std::vector<float> res(m.counts[t]);
    MP_OK(bagua_scheduler_residual(s, t, res.data(), res.size()));
    MP_CHECK(std::all_of(res.begin(), res.end(), [](float v) { return v == 0.0f; }));
    for (size_t i = 0; i < res.size(); ++i) worst = std::max(worst, std::fabs(out_sum[t][i] - in_sum[t][i]));
  }
  const double bound = 1e-5 * steps * g_size * 3;
  if (g_rank == 0)
    std::printf(
        "latency: 4 MiB quantized buckets, then %s ones at full precision: residuals zero, worst |sum out "
        "- sum in| = %.3g (bound %.3g)\n",
        hosts ? "16 KiB" : "64 KiB", worst, bound);
  MP_CHECK(worst <= bound);
  MP_OK(bagua_scheduler_destroy(s));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string mode = argc > 1 ? argv[1] : "orders";
  // Every mode but latency tests quantization itself, at sizes below the full-precision size.
  if (mode != "latency") setenv("BAGUA_QUANTIZED_MIN_BYTES", "0", 0);
  bagua_comm_t comm;
  MP_OK(bagua_comm_init_from_env(&comm));
  MP_OK(bagua_comm_rank(comm, &g_rank));
  MP_OK(bagua_comm_size(comm, &g_size));
  int rc;
  if (mode == "orders")
    rc = orders(comm);
  else if (mode == "exact")
    rc = exact(comm);
  else if (mode == "unused")
    rc = unused(comm);
  else if (mode == "resize")
    rc = resize(comm);
  else if (mode == "errors")
    rc = errors(comm);
  else if (mode == "overlap")
    rc = overlap(comm);
  else if (mode == "failure")
    rc = failure(comm);
  else if (mode == "tune")
    rc = tune(comm);
  else if (mode == "device")
    rc = device(comm);
  else if (mode == "blocked")
    rc = blocked(comm);
  else if (mode == "latency")
    rc = latency(comm);
  else {
    std::fprintf(stderr, "mp_scheduler: unknown mode %s\n", mode.c_str());
    return 2;
  }
  if (rc == 0) MP_OK(bagua_comm_destroy(comm));
  return rc;
}

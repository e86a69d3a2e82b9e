// A small data-parallel trainer that uses every bagua algorithm: a 2-layer MLP (hand-written forward and
// backward) on a synthetic classification set, SGD with momentum or Adam. Links only libbagua and the C++
// standard library. Run under a launcher:   bagua-run -n 4 bagua_trainer --algorithm bytegrad
//
//   --algorithm allreduce|bytegrad|qadam|onebit_adam|decentralized|lpdec|async
//   --optimizer sgd|adam   --lr X   --epochs N   --batch B (global, split across ranks)   --hidden H
//   --bucket-mb M   --no-overlap   --topology ring|onepeer   --warmup S (qadam, onebit_adam)   --seed S
//   --staleness K (async: at most K local steps per averaging round, default 4)
//
// Gradient algorithms (allreduce, bytegrad, and qadam/onebit_adam on momentum) cut the flat gradient into
// buckets from the end (the last layer's gradients exist first) and hand each to a communication thread as
// soon as backward has produced it; --no-overlap runs the same buckets inline. The weight algorithms
// (decentralized, lpdec, async) step locally and average weights.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "bagua/bagua.h"

namespace {

void check(bagua_status_t s, const char* what) {
  if (s == BAGUA_SUCCESS) return;
  std::fprintf(stderr, "bagua_trainer: %s failed: %s\n", what, bagua_get_last_error(nullptr));
  std::exit(1);
}
#define CHECK(call) check((call), #call)

struct Options {
  std::string algorithm = "allreduce", optimizer = "", topology = "onepeer";
  float lr = 0;
  int epochs = 8, batch = 256, hidden = 256, features = 32, classes = 8, warmup = 40, staleness = 4;
  int train_samples = 16384, test_samples = 4096;
  double bucket_mb = 0.01;
  bool overlap = true;
  uint64_t seed = 1;
};

// Synthetic data: Gaussian inputs labelled by a random teacher MLP (non-linear class boundaries).
struct Dataset {
  int features, classes;
  std::vector<float> x;
  std::vector<int> y;
  size_t size() const { return y.size(); }
};

Dataset make_data(const Options& o, int samples, uint64_t seed) {
  std::mt19937_64 teacher_rng(o.seed * 1000 + 7), rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const int th = 32;
  std::vector<float> t1(th * o.features), t2(o.classes * th);
  for (float& v : t1) v = normal(teacher_rng);
  for (float& v : t2) v = normal(teacher_rng);
  Dataset d{o.features, o.classes, std::vector<float>(static_cast<size_t>(samples) * o.features),
            std::vector<int>(samples)};
  std::vector<float> h(th);
  for (int s = 0; s < samples; ++s) {
    float* x = &d.x[static_cast<size_t>(s) * o.features];
    for (int f = 0; f < o.features; ++f) x[f] = normal(rng);
    for (int j = 0; j < th; ++j) {
      float a = 0;
      for (int f = 0; f < o.features; ++f) a += t1[j * o.features + f] * x[f];
      h[j] = std::tanh(a / std::sqrt(static_cast<float>(o.features)));
    }
    int best = 0;
    float best_v = -1e30f;
    for (int c = 0; c < o.classes; ++c) {
      float v = 0;
      for (int j = 0; j < th; ++j) v += t2[c * th + j] * h[j];
      if (v > best_v) best_v = v, best = c;
    }
    d.y[s] = best;
  }
  return d;
}

// Parameters, flat: [W1 (H x D), b1 (H) | W2 (C x H), b2 (C)]; layer 2 last, so its gradients come first.
struct Mlp {
  int d, h, c;
  std::vector<float> w;
  size_t w1() const { return 0; }
  size_t b1() const { return static_cast<size_t>(h) * d; }
  size_t w2() const { return b1() + h; }
  size_t b2() const { return w2() + static_cast<size_t>(c) * h; }
  size_t size() const { return b2() + c; }
  size_t layer2_begin() const { return w2(); }

  Mlp(int d_, int h_, int c_, uint64_t seed) : d(d_), h(h_), c(c_), w(size()) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (size_t i = w1(); i < b1(); ++i) w[i] = normal(rng) * std::sqrt(2.0f / d);
    for (size_t i = w2(); i < b2(); ++i) w[i] = normal(rng) * std::sqrt(1.0f / h);
  }

  // Mean cross-entropy over samples [begin, end) of `data` (indices through `order`); with grad: its gradient,
  // calling layer_done(first element) after each layer's gradients are complete (layer 2, then layer 1).
  double forward_backward(const Dataset& data, const std::vector<int>& order, size_t begin, size_t end,
                          std::vector<float>* grad, const std::function<void(size_t)>& layer_done) const {
    const size_t n = end - begin;
    std::vector<float> hid(n * h), probs(n * c);
    double loss = 0;
    for (size_t s = 0; s < n; ++s) {
      const float* x = &data.x[static_cast<size_t>(order[begin + s]) * d];
      float* hs = &hid[s * h];
      for (int j = 0; j < h; ++j) {
        float a = w[b1() + j];
        const float* row = &w[w1() + static_cast<size_t>(j) * d];
        for (int f = 0; f < d; ++f) a += row[f] * x[f];
        hs[j] = a > 0 ? a : 0;
      }
      float* p = &probs[s * c];
      float mx = -1e30f;
      for (int k = 0; k < c; ++k) {
        float v = w[b2() + k];
        const float* row = &w[w2() + static_cast<size_t>(k) * h];
        for (int j = 0; j < h; ++j) v += row[j] * hs[j];
        p[k] = v;
        mx = std::max(mx, v);
      }
      float z = 0;
      for (int k = 0; k < c; ++k) z += (p[k] = std::exp(p[k] - mx));
      for (int k = 0; k < c; ++k) p[k] /= z;
      loss -= std::log(std::max(p[data.y[order[begin + s]]], 1e-30f));
    }
    if (!grad) return loss / n;
    std::vector<float>& g = *grad;
    std::fill(g.begin(), g.end(), 0.0f);
    std::vector<float> dhid(n * h, 0.0f);
    const float inv = 1.0f / n;
    for (size_t s = 0; s < n; ++s) {  // layer 2
      float* p = &probs[s * c];
      p[data.y[order[begin + s]]] -= 1.0f;
      for (int k = 0; k < c; ++k) {
        float dk = p[k] * inv;
        g[b2() + k] += dk;
        float* grow = &g[w2() + static_cast<size_t>(k) * h];
        const float* row = &w[w2() + static_cast<size_t>(k) * h];
        for (int j = 0; j < h; ++j) {
          grow[j] += dk * hid[s * h + j];
          dhid[s * h + j] += dk * row[j];
        }
      }
    }
    layer_done(layer2_begin());
    for (size_t s = 0; s < n; ++s) {  // layer 1
      const float* x = &data.x[static_cast<size_t>(order[begin + s]) * d];
      for (int j = 0; j < h; ++j) {
        if (hid[s * h + j] <= 0) continue;
        float dj = dhid[s * h + j];
        g[b1() + j] += dj;
        float* grow = &g[w1() + static_cast<size_t>(j) * d];
        for (int f = 0; f < d; ++f) grow[f] += dj * x[f];
      }
    }
    layer_done(0);
    return loss / n;
  }

  double accuracy(const Dataset& data, size_t begin, size_t end, size_t* correct) const {
    std::vector<float> hs(h);
    size_t ok = 0;
    for (size_t s = begin; s < end; ++s) {
      const float* x = &data.x[s * d];
      for (int j = 0; j < h; ++j) {
        float a = w[b1() + j];
        for (int f = 0; f < d; ++f) a += w[w1() + static_cast<size_t>(j) * d + f] * x[f];
        hs[j] = a > 0 ? a : 0;
      }
      int best = 0;
      float best_v = -1e30f;
      for (int k = 0; k < c; ++k) {
        float v = w[b2() + k];
        for (int j = 0; j < h; ++j) v += w[w2() + static_cast<size_t>(k) * h + j] * hs[j];
        if (v > best_v) best_v = v, best = k;
      }
      ok += best == data.y[s];
    }
    *correct = ok;
    return end > begin ? static_cast<double>(ok) / (end - begin) : 0;
  }
};

// A bucket of the flat gradient (or momentum) vector, and the state its compressed forms need.
struct Bucket {
  size_t begin, end;
  bagua_qstate_t qstate = nullptr;
};

// Runs bucket jobs on a communication thread, in submission order (or inline with overlap off).
class CommThread {
 public:
  explicit CommThread(bool overlap) : overlap_(overlap) {
    if (overlap_) thread_ = std::thread([this] { loop(); });
  }
  ~CommThread() {
    if (!overlap_) return;
    {
      std::lock_guard<std::mutex> g(m_);
      quit_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  void submit(std::function<void()> job) {
    if (!overlap_) return job();
    std::lock_guard<std::mutex> g(m_);
    jobs_.push_back(std::move(job));
    ++pending_;
    cv_.notify_all();
  }
  void drain() {
    if (!overlap_) return;
    std::unique_lock<std::mutex> g(m_);
    done_cv_.wait(g, [this] { return pending_ == 0; });
  }

 private:
  void loop() {
    for (;;) {
      std::function<void()> job;
      {
        std::unique_lock<std::mutex> g(m_);
        cv_.wait(g, [this] { return quit_ || !jobs_.empty(); });
        if (jobs_.empty()) return;
        job = std::move(jobs_.front());
        jobs_.pop_front();
      }
      job();
      std::lock_guard<std::mutex> g(m_);
      if (--pending_ == 0) done_cv_.notify_all();
    }
  }
  bool overlap_;
  std::thread thread_;
  std::mutex m_;
  std::condition_variable cv_, done_cv_;
  std::deque<std::function<void()>> jobs_;
  int pending_ = 0;
  bool quit_ = false;
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "bagua_trainer: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--algorithm")
      o.algorithm = value();
    else if (a == "--optimizer")
      o.optimizer = value();
    else if (a == "--topology")
      o.topology = value();
    else if (a == "--lr")
      o.lr = std::stof(value());
    else if (a == "--epochs")
      o.epochs = std::max(1, std::stoi(value()));
    else if (a == "--batch")
      o.batch = std::stoi(value());
    else if (a == "--hidden")
      o.hidden = std::stoi(value());
    else if (a == "--warmup")
      o.warmup = std::stoi(value());
    else if (a == "--staleness")
      o.staleness = std::max(1, std::stoi(value()));
    else if (a == "--bucket-mb")
      o.bucket_mb = std::stod(value());
    else if (a == "--no-overlap")
      o.overlap = false;
    else if (a == "--seed")
      o.seed = std::stoull(value());
    else {
      std::fprintf(stderr, "bagua_trainer: unknown option %s (see the comment at the top of bagua_trainer.cc)\n",
                   a.c_str());
      std::exit(2);
    }
  }
  const std::string algos[] = {"allreduce", "bytegrad", "qadam", "onebit_adam", "decentralized", "lpdec", "async"};
  if (std::find(std::begin(algos), std::end(algos), o.algorithm) == std::end(algos)) {
    std::fprintf(stderr, "bagua_trainer: unknown --algorithm %s\n", o.algorithm.c_str());
    std::exit(2);
  }
  if (o.optimizer.empty()) o.optimizer = (o.algorithm == "qadam" || o.algorithm == "onebit_adam") ? "adam" : "sgd";
  if (o.lr == 0) o.lr = o.optimizer == "adam" ? 0.002f : 0.05f;
  return o;
}

uint64_t fnv1a(const void* p, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; ++i) h = (h ^ static_cast<const uint8_t*>(p)[i]) * 1099511628211ull;
  return h;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  try {
    o = parse(argc, argv);
  } catch (const std::exception&) {
    std::fprintf(stderr, "bagua_trainer: a numeric option has a value that is not a number\n");
    return 2;
  }
  if (o.hidden <= 0 || o.bucket_mb <= 0 || o.lr <= 0) {
    std::fprintf(stderr, "bagua_trainer: --hidden, --bucket-mb and --lr must be positive\n");
    return 2;
  }
  bagua_comm_t comm;
  CHECK(bagua_comm_init_from_env(&comm));
  int rank, n;
  CHECK(bagua_comm_rank(comm, &rank));
  CHECK(bagua_comm_size(comm, &n));
  if (o.batch <= 0 || o.batch % n != 0 || o.batch > o.train_samples) {
    std::fprintf(stderr, "bagua_trainer: --batch %d must be a positive multiple of the %d ranks, at most %d\n", o.batch,
                 n, o.train_samples);
    return 2;
  }
  const Dataset train = make_data(o, o.train_samples, o.seed * 31 + 1),
                test = make_data(o, o.test_samples, o.seed * 31 + 2);
  Mlp model(o.features, o.hidden, o.classes, o.seed * 77);
  const size_t p = model.size();
  std::vector<float> grad(p), momentum(p, 0.0f), variance(p, 0.0f), shared(p);

  // Buckets over the flat vector, from the end (layer 2 first).
  std::vector<Bucket> buckets;
  size_t per_bucket = std::max<size_t>(1, static_cast<size_t>(o.bucket_mb * (1 << 20) / 4));
  for (size_t end = p; end > 0;) {
    size_t begin = end > per_bucket ? end - per_bucket : 0;
    buckets.push_back({begin, end});
    end = begin;
  }
  const bool gradient_algo =
      o.algorithm == "allreduce" || o.algorithm == "bytegrad" || o.algorithm == "qadam" || o.algorithm == "onebit_adam";
  bagua_compression_t cfg = BAGUA_COMPRESSION_INITIALIZER;
  cfg.chunk = 256;
  if (o.algorithm == "onebit_adam") cfg.kind = BAGUA_COMPRESS_SIGN, cfg.error_feedback = 1;
  for (Bucket& b : buckets)
    if (o.algorithm == "bytegrad" || o.algorithm == "qadam" || o.algorithm == "onebit_adam")
      CHECK(bagua_qstate_create(comm, b.end - b.begin, BAGUA_FLOAT32, &cfg, &b.qstate));

  bagua_topology_t topo = nullptr;
  if (o.algorithm == "decentralized")
    CHECK(bagua_topology_create(comm, o.topology == "ring" ? BAGUA_TOPO_RING : BAGUA_TOPO_ONE_PEER_EXPONENTIAL, &topo));
  bagua_lpdec_t lpdec = nullptr;
  if (o.algorithm == "lpdec") {
    bagua_compression_t lcfg = BAGUA_COMPRESSION_INITIALIZER;
    lcfg.chunk = 256;
    CHECK(bagua_lpdec_create(comm, p, &lcfg, model.w.data(), &lpdec));
  }
  bagua_async_average_t async = nullptr;
  if (o.algorithm == "async") CHECK(bagua_async_average_start(comm, model.w.data(), p, BAGUA_FLOAT32, 0, &async));

  const int local_batch = o.batch / n;
  const int steps_per_epoch = o.train_samples / o.batch;
  const float beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f;
  uint64_t step = 0;
  double final_loss = 0, final_acc = 0, total_step_s = 0;
  uint64_t total_bytes = 0, total_steps = 0;
  if (rank == 0)
    std::printf("# bagua_trainer: %s, %s, %d ranks, %zu parameters, %zu buckets, overlap %s\n", o.algorithm.c_str(),
                o.optimizer.c_str(), n, p, buckets.size(), o.overlap ? "on" : "off");
  CommThread comm_thread(o.overlap && gradient_algo);
  std::mt19937_64 shuffle_rng(o.seed * 13);
  for (int epoch = 0; epoch < o.epochs; ++epoch) {
    std::vector<int> order(train.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
    std::shuffle(order.begin(), order.end(), shuffle_rng);  // same on every rank (same seed)
    double loss_sum = 0;
    bagua_stats_t before;
    before.size = sizeof(before);
    CHECK(bagua_comm_get_stats(comm, &before));
    auto t0 = std::chrono::steady_clock::now();
    for (int s = 0; s < steps_per_epoch; ++s, ++step) {
      // This rank's slice of global batch s.
      size_t begin = static_cast<size_t>(s) * o.batch + static_cast<size_t>(rank) * local_batch;
      const bool compressed_momentum =
          (o.algorithm == "qadam" || o.algorithm == "onebit_adam") && step >= static_cast<uint64_t>(o.warmup);
      // Each bucket's job once backward has produced it: average the gradient, or (after warm-up) update and
      // average the momentum.
      auto bucket_job = [&](Bucket& b) {
        size_t len = b.end - b.begin;
        if (compressed_momentum) {
          for (size_t i = b.begin; i < b.end; ++i) momentum[i] = beta1 * momentum[i] + (1 - beta1) * grad[i];
          CHECK(bagua_quantized_allreduce(&momentum[b.begin], &momentum[b.begin], len, BAGUA_FLOAT32, BAGUA_AVG, &cfg,
                                          b.qstate, comm, nullptr));
        } else if (o.algorithm == "bytegrad") {
          CHECK(bagua_quantized_allreduce(&grad[b.begin], &grad[b.begin], len, BAGUA_FLOAT32, BAGUA_AVG, &cfg, b.qstate,
                                          comm, nullptr));
        } else {
          CHECK(bagua_allreduce(&grad[b.begin], &grad[b.begin], len, BAGUA_FLOAT32, BAGUA_AVG, comm, nullptr));
        }
      };
      size_t next_bucket = 0;
      auto layer_done = [&](size_t ready_from) {  // hand over every bucket now complete
        if (!gradient_algo) return;
        while (next_bucket < buckets.size() && buckets[next_bucket].begin >= ready_from) {
          Bucket* b = &buckets[next_bucket++];
          comm_thread.submit([&, b] { bucket_job(*b); });
        }
      };
      if (async) {  // compute on a snapshot; hold the lock only to copy and to update
        CHECK(bagua_async_average_lock(async));
        Mlp snapshot = model;
        CHECK(bagua_async_average_unlock(async));
        loss_sum += snapshot.forward_backward(train, order, begin, begin + local_batch, &grad, layer_done);
        CHECK(bagua_async_average_lock(async));
      } else {
        loss_sum += model.forward_backward(train, order, begin, begin + local_batch, &grad, layer_done);
      }
      comm_thread.drain();
      // Optimizer step.
      if (o.optimizer == "sgd") {
        for (size_t i = 0; i < p; ++i) {
          momentum[i] = 0.9f * momentum[i] + grad[i];
          model.w[i] -= o.lr * momentum[i];
        }
      } else {
        const bool frozen = compressed_momentum;  // QAdam / 1-bit Adam: variance frozen after warm-up
        const float t = static_cast<float>(step + 1);
        for (size_t i = 0; i < p; ++i) {
          if (!compressed_momentum) momentum[i] = beta1 * momentum[i] + (1 - beta1) * grad[i];
          if (!frozen) variance[i] = beta2 * variance[i] + (1 - beta2) * grad[i] * grad[i];
          float mhat = momentum[i] / (1 - std::pow(beta1, t));
          float vhat = variance[i] / (1 - std::pow(beta2, frozen ? static_cast<float>(o.warmup) : t));
          model.w[i] -= o.lr * mhat / (std::sqrt(vhat) + eps);
        }
      }
      if (async) {
        CHECK(bagua_async_average_unlock(async));
        // Bounded staleness: at most --staleness local steps per averaging round. Where ranks outnumber
        // cores the averaging thread can starve, and models trained apart too long average badly.
        uint64_t rounds = 0;
        CHECK(bagua_async_average_stats(async, &rounds));
        auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
        while (step + 1 > static_cast<uint64_t>(o.staleness) * (rounds + 1)) {
          if (std::chrono::steady_clock::now() > give_up) {
            std::fprintf(stderr, "bagua_trainer: the averaging thread made no progress for 60 s\n");
            return 1;
          }
          std::this_thread::sleep_for(std::chrono::microseconds(100));
          CHECK(bagua_async_average_stats(async, &rounds));
        }
      }
      if (topo)
        CHECK(bagua_neighbor_allreduce(model.w.data(), model.w.data(), p, BAGUA_FLOAT32, topo, step, comm, nullptr));
      if (lpdec) CHECK(bagua_lpdec_step(lpdec, model.w.data()));
    }
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    bagua_stats_t after;
    after.size = sizeof(after);
    CHECK(bagua_comm_get_stats(comm, &after));
    uint64_t bytes = after.bytes_sent - before.bytes_sent;
    // Evaluation: the mean loss, and accuracy on each rank's shard of the held-out set (collectives).
    double loss = loss_sum / steps_per_epoch;
    CHECK(bagua_allreduce(&loss, &loss, 1, BAGUA_FLOAT64, BAGUA_AVG, comm, nullptr));
    size_t shard = test.size() / n, correct;
    if (async) CHECK(bagua_async_average_lock(async));  // the averaging thread writes the weights
    Mlp evaluated = model;
    if (async) CHECK(bagua_async_average_unlock(async));
    evaluated.accuracy(test, rank * shard, (rank + 1) * shard, &correct);
    double counts[2] = {static_cast<double>(correct), static_cast<double>(shard)};
    CHECK(bagua_allreduce(counts, counts, 2, BAGUA_FLOAT64, BAGUA_SUM, comm, nullptr));
    double acc = counts[0] / counts[1];
    double step_s = seconds / steps_per_epoch, max_step_s = step_s;
    CHECK(bagua_allreduce(&max_step_s, &max_step_s, 1, BAGUA_FLOAT64, BAGUA_MAX, comm, nullptr));
    if (rank == 0)
      std::printf("epoch %2d  loss %.6f  accuracy %.2f%%  step %.2f ms  sent %.1f KiB/step\n", epoch, loss, 100 * acc,
                  1e3 * max_step_s, bytes / 1024.0 / steps_per_epoch);
    std::fflush(stdout);
    final_loss = loss, final_acc = acc;
    total_step_s += max_step_s * steps_per_epoch;
    total_bytes += bytes;
    total_steps += steps_per_epoch;
  }
  if (async) {  // stop averaging, then one exact average so that every rank ends with the same model
    uint64_t rounds = 0;
    CHECK(bagua_async_average_stats(async, &rounds));
    if (rank == 0)
      std::printf("async averaging: %llu rounds in %llu steps\n", (unsigned long long)rounds, (unsigned long long)step);
    CHECK(bagua_async_average_stop(async));
  }
  if (!gradient_algo) {  // weight algorithms: report the average model (one exact allreduce), as is usual
    CHECK(bagua_allreduce(model.w.data(), model.w.data(), p, BAGUA_FLOAT32, BAGUA_AVG, comm, nullptr));
    size_t shard = test.size() / n, correct;
    model.accuracy(test, rank * shard, (rank + 1) * shard, &correct);
    double counts[2] = {static_cast<double>(correct), static_cast<double>(shard)};
    CHECK(bagua_allreduce(counts, counts, 2, BAGUA_FLOAT64, BAGUA_SUM, comm, nullptr));
    final_acc = counts[0] / counts[1];
  }
  if (lpdec) CHECK(bagua_lpdec_destroy(lpdec));
  if (topo) CHECK(bagua_topology_destroy(topo));
  for (Bucket& b : buckets)
    if (b.qstate) CHECK(bagua_qstate_destroy(b.qstate));
  if (rank == 0)
    std::printf(
        "summary algorithm=%s ranks=%d loss=%.6f accuracy=%.4f step_ms=%.3f bytes_per_step=%.0f weights=%016llx\n",
        o.algorithm.c_str(), n, final_loss, final_acc, 1e3 * total_step_s / total_steps,
        static_cast<double>(total_bytes) / total_steps,
        static_cast<unsigned long long>(fnv1a(model.w.data(), p * sizeof(float))));
  CHECK(bagua_comm_destroy(comm));
  return 0;
}

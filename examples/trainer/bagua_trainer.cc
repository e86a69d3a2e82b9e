// A small data-parallel trainer that uses every bagua algorithm: a 2-layer MLP (hand-written forward and
// backward) on a synthetic classification set, SGD with momentum or Adam. Links only libbagua and the C++
// standard library. Run under a launcher:   bagua-run -n 4 bagua_trainer --algorithm bytegrad
//
//   --algorithm allreduce|bytegrad|qadam|onebit_adam|decentralized|lpdec|async
//   --optimizer sgd|adam   --lr X   --epochs N   --batch B (global, split across ranks)   --hidden H
//   --features D   --train-samples N   --bucket-mb M   --autotune   --no-overlap   --topology ring|onepeer
//   --warmup S (qadam, onebit_adam)   --seed S   --staleness K (async: at most K local steps per averaging round)
//   --interval MS (async: the averaging thread's pause between rounds, default 3)
//   --elastic   --kill-rank R --kill-step S (rank R kills itself with SIGKILL at global step S, to try --elastic)
//
// Every algorithm but async runs through the library's bucket scheduler (bagua_scheduler_*): the parameters are
// registered as four tensors in the order backward produces their gradients (layer 2, then layer 1), and each is
// marked ready from the backward pass as soon as it exists, so communication overlaps the rest of backward;
// --no-overlap marks them all after backward. Buckets are --bucket-mb, or tuned online with --autotune.
// Gradient algorithms (allreduce, bytegrad, qadam, onebit_adam) register the gradients; the weight algorithms
// (decentralized, lpdec) register the weights after the local step. async averages weights on its own thread.
// --elastic: when a rank dies, the survivors shrink the communicator (bagua_comm_shrink), take the model, the
// optimizer state and the position in the epoch from the new rank 0, rebuild the scheduler and go on with the
// global batch split across fewer ranks (each rank's share rounded down). Not with async.
#include <signal.h>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "bagua/bagua.h"

namespace {

// With --elastic a lost peer (REMOTE, TIMEOUT) is thrown to the training loop, which shrinks and goes on.
bool g_elastic = false;
struct PeerLost {
  bagua_status_t status;
};

void check(bagua_status_t s, const char* what) {
  if (s == BAGUA_SUCCESS) return;
  if (g_elastic && (s == BAGUA_ERR_REMOTE || s == BAGUA_ERR_TIMEOUT)) throw PeerLost{s};
  std::fprintf(stderr, "bagua_trainer: %s failed: %s\n", what, bagua_get_last_error(nullptr));
  std::exit(1);
}
#define CHECK(call) check((call), #call)

struct Options {
  std::string algorithm = "allreduce", optimizer = "", topology = "onepeer";
  float lr = 0;
  int epochs = 8, batch = 256, hidden = 256, features = 32, classes = 8, warmup = 40, staleness = 4, interval_ms = 3;
  int train_samples = 16384, test_samples = 4096;
  double bucket_mb = 0.01;
  bool overlap = true, autotune = false, elastic = false;
  int kill_rank = -1, kill_step = -1;
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
    else if (a == "--interval")
      o.interval_ms = std::max(0, std::stoi(value()));
    else if (a == "--bucket-mb")
      o.bucket_mb = std::stod(value());
    else if (a == "--no-overlap")
      o.overlap = false;
    else if (a == "--autotune")
      o.autotune = true;
    else if (a == "--features")
      o.features = std::stoi(value());
    else if (a == "--train-samples")
      o.train_samples = std::stoi(value());
    else if (a == "--seed")
      o.seed = std::stoull(value());
    else if (a == "--elastic")
      o.elastic = true;
    else if (a == "--kill-rank")
      o.kill_rank = std::stoi(value());
    else if (a == "--kill-step")
      o.kill_step = std::stoi(value());
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
  if (o.elastic && o.algorithm == "async") {
    std::fprintf(stderr, "bagua_trainer: --elastic does not support --algorithm async\n");
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
  const int initial_rank = rank;
  if (o.batch <= 0 || o.batch % n != 0 || o.batch > o.train_samples) {
    std::fprintf(stderr, "bagua_trainer: --batch %d must be a positive multiple of the %d ranks, at most %d\n", o.batch,
                 n, o.train_samples);
    return 2;
  }
  g_elastic = o.elastic;
  const Dataset train = make_data(o, o.train_samples, o.seed * 31 + 1),
                test = make_data(o, o.test_samples, o.seed * 31 + 2);
  Mlp model(o.features, o.hidden, o.classes, o.seed * 77);
  const size_t p = model.size();
  std::vector<float> grad(p), momentum(p, 0.0f), variance(p, 0.0f);

  const bool gradient_algo =
      o.algorithm == "allreduce" || o.algorithm == "bytegrad" || o.algorithm == "qadam" || o.algorithm == "onebit_adam";
  const bool adam_momentum = o.algorithm == "qadam" || o.algorithm == "onebit_adam";

  // The bucket scheduler, for every algorithm but async. Tensors in the order backward produces them:
  // W2, b2 (layer 2), then W1, b1. Gradient algorithms register the gradients, weight algorithms the weights.
  bagua_scheduler_t sched = nullptr;
  float* const base = gradient_algo ? grad.data() : model.w.data();
  const size_t offsets[4] = {model.w2(), model.b2(), model.w1(), model.b1()};
  const size_t counts[4] = {static_cast<size_t>(o.classes) * o.hidden, static_cast<size_t>(o.classes),
                            static_cast<size_t>(o.hidden) * o.features, static_cast<size_t>(o.hidden)};
  auto make_scheduler = [&] {
    bagua_compression_t cfg = BAGUA_COMPRESSION_INITIALIZER;
    cfg.chunk = 256;
    if (o.algorithm == "onebit_adam") cfg.kind = BAGUA_COMPRESS_SIGN, cfg.error_feedback = 1;
    bagua_scheduler_config_t sc = BAGUA_SCHEDULER_CONFIG_INITIALIZER;
    sc.algorithm = o.algorithm == "allreduce"       ? BAGUA_BUCKET_ALLREDUCE
                   : o.algorithm == "bytegrad"      ? BAGUA_BUCKET_QUANTIZED
                   : adam_momentum                  ? BAGUA_BUCKET_QADAM
                   : o.algorithm == "decentralized" ? BAGUA_BUCKET_DECENTRALIZED
                                                    : BAGUA_BUCKET_LOW_PRECISION_DECENTRALIZED;
    sc.compression = &cfg;
    sc.bucket_bytes = static_cast<size_t>(o.bucket_mb * (1 << 20));
    sc.autotune = o.autotune ? 1 : 0;
    sc.topology = o.topology == "ring" ? BAGUA_TOPO_RING : BAGUA_TOPO_ONE_PEER_EXPONENTIAL;
    sc.warmup_steps = o.warmup;
    sc.beta1 = 0.9f;
    CHECK(bagua_scheduler_create(comm, &sc, &sched));
    void* tensors[4];
    bagua_datatype_t dtypes[4];
    for (int t = 0; t < 4; ++t) tensors[t] = base + offsets[t], dtypes[t] = BAGUA_FLOAT32;
    CHECK(bagua_scheduler_register(sched, 4, tensors, counts, dtypes));
  };
  if (o.algorithm != "async") make_scheduler();
  bagua_async_average_t async = nullptr;
  if (o.algorithm == "async")
    CHECK(bagua_async_average_start(comm, model.w.data(), p, BAGUA_FLOAT32, o.interval_ms, &async));

  int local_batch = o.batch / n;
  const int steps_per_epoch = o.train_samples / o.batch;
  const float beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f;
  uint64_t step = 0;
  double final_loss = 0, final_acc = 0, total_step_s = 0;
  uint64_t total_bytes = 0, total_steps = 0;
  bagua_scheduler_info_t info;
  info.size = sizeof info;
  if (rank == 0)
    std::printf("# bagua_trainer: %s, %s, %d ranks, %zu parameters, bucket %s, overlap %s%s\n", o.algorithm.c_str(),
                o.optimizer.c_str(), n, p, o.autotune ? "tuned" : "fixed", o.overlap ? "on" : "off",
                o.elastic ? ", elastic" : "");
  // Epoch e's sample order: e + 1 shuffles from the seed, the same on every rank and after a shrink.
  auto epoch_order = [&](int e) {
    std::mt19937_64 shuffle_rng(o.seed * 13);
    std::vector<int> order(train.size());
    for (int k = 0; k <= e; ++k) {
      for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
      std::shuffle(order.begin(), order.end(), shuffle_rng);
    }
    return order;
  };
  auto sent_bytes = [&]() -> uint64_t {
    if (sched) {
      CHECK(bagua_scheduler_get_info(sched, &info));
      return info.bytes_sent;
    }
    bagua_stats_t stats;
    stats.size = sizeof(stats);
    CHECK(bagua_comm_get_stats(comm, &stats));
    return stats.bytes_sent;
  };
  // Where training stands: the next step s of epoch `epoch`; a shrink takes it from the new rank 0.
  int epoch = 0, s = 0;
  bool epoch_started = false;
  std::vector<int> order;
  double loss_sum = 0;
  uint64_t sent_before = 0;
  auto t0 = std::chrono::steady_clock::now();
  // --elastic: the survivors of a lost peer shrink, agree on the state of the new rank 0 and rebuild the scheduler.
  // A step that failed midway is run again from that state.
  auto recover = [&](bagua_status_t lost) {
    auto start = std::chrono::steady_clock::now();
    if (sched) bagua_scheduler_destroy(sched);  // its communicator failed: the status says so, nothing more
    sched = nullptr;
    bagua_comm_t survivors = nullptr;
    if (bagua_comm_shrink(comm, &survivors) != BAGUA_SUCCESS) {
      std::fprintf(stderr, "bagua_trainer: rank %d: bagua_comm_shrink failed: %s\n", initial_rank,
                   bagua_get_last_error(comm));
      std::exit(1);
    }
    bagua_comm_destroy(comm);
    comm = survivors;
    CHECK(bagua_comm_rank(comm, &rank));
    CHECK(bagua_comm_size(comm, &n));
    double position[4] = {static_cast<double>(epoch), static_cast<double>(s), static_cast<double>(step), loss_sum};
    CHECK(bagua_broadcast(position, position, 4, BAGUA_FLOAT64, 0, comm, nullptr));
    for (std::vector<float>* state : {&model.w, &momentum, &variance})
      CHECK(bagua_broadcast(state->data(), state->data(), p, BAGUA_FLOAT32, 0, comm, nullptr));
    epoch = static_cast<int>(position[0]);
    s = static_cast<int>(position[1]);
    step = static_cast<uint64_t>(position[2]);
    loss_sum = position[3];
    order = epoch_order(epoch);
    epoch_started = true;
    local_batch = o.batch / n;
    make_scheduler();
    sent_before = sent_bytes();
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    if (rank == 0)
      std::printf(
          "# elastic: a peer was lost (%s); %d ranks go on from epoch %d step %d, %d samples each per step "
          "(recovered in %.0f ms)\n",
          bagua_status_string(lost), n, epoch, s, local_batch, ms);
  };
  while (epoch < o.epochs) {
    try {
      if (!epoch_started) {
        order = epoch_order(epoch);
        loss_sum = 0;
        sent_before = sent_bytes();
        t0 = std::chrono::steady_clock::now();
        epoch_started = true;
      }
      for (; s < steps_per_epoch; ++s, ++step) {
        if (initial_rank == o.kill_rank && step == static_cast<uint64_t>(o.kill_step)) raise(SIGKILL);
        // This rank's slice of global batch s.
        size_t begin = static_cast<size_t>(s) * o.batch + static_cast<size_t>(rank) * local_batch;
        const bool compressed_momentum = adam_momentum && step >= static_cast<uint64_t>(o.warmup);
        // Backward hands over each layer's gradients as soon as they are complete (layer 2 is tensors 0 and 1).
        auto layer_done = [&](size_t ready_from) {
          if (!gradient_algo || !o.overlap) return;
          for (int t : ready_from == 0 ? std::vector<int>{2, 3} : std::vector<int>{0, 1})
            CHECK(bagua_scheduler_mark_ready(sched, t, nullptr));
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
        if (gradient_algo) {
          if (!o.overlap)
            for (int t = 0; t < 4; ++t) CHECK(bagua_scheduler_mark_ready(sched, t, nullptr));
          CHECK(bagua_scheduler_wait(sched, nullptr));
        }
        // Optimizer step. After QAdam's warm-up the scheduler hands back the averaged momentum in grad.
        if (o.optimizer == "sgd") {
          for (size_t i = 0; i < p; ++i) {
            momentum[i] = 0.9f * momentum[i] + grad[i];
            model.w[i] -= o.lr * momentum[i];
          }
        } else {
          const bool frozen = compressed_momentum;  // QAdam / 1-bit Adam: variance frozen after warm-up
          const float t = static_cast<float>(step + 1);
          for (size_t i = 0; i < p; ++i) {
            if (compressed_momentum)
              momentum[i] = grad[i];
            else
              momentum[i] = beta1 * momentum[i] + (1 - beta1) * grad[i];
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
        if (!gradient_algo && sched) {  // weight algorithms: average the updated weights
          for (int t = 0; t < 4; ++t) CHECK(bagua_scheduler_mark_ready(sched, t, nullptr));
          CHECK(bagua_scheduler_wait(sched, nullptr));
        }
      }
      double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      uint64_t bytes = sent_bytes() - sent_before;
      // Evaluation: the mean loss, and accuracy on each rank's shard of the held-out set (collectives).
      double loss = loss_sum / steps_per_epoch;
      CHECK(bagua_allreduce(&loss, &loss, 1, BAGUA_FLOAT64, BAGUA_AVG, comm, nullptr));
      size_t shard = test.size() / n, correct;
      if (async) CHECK(bagua_async_average_lock(async));  // the averaging thread writes the weights
      Mlp evaluated = model;
      if (async) CHECK(bagua_async_average_unlock(async));
      evaluated.accuracy(test, rank * shard, (rank + 1) * shard, &correct);
      double eval_counts[2] = {static_cast<double>(correct), static_cast<double>(shard)};
      CHECK(bagua_allreduce(eval_counts, eval_counts, 2, BAGUA_FLOAT64, BAGUA_SUM, comm, nullptr));
      double acc = eval_counts[0] / eval_counts[1];
      double step_s = seconds / steps_per_epoch, max_step_s = step_s;
      CHECK(bagua_allreduce(&max_step_s, &max_step_s, 1, BAGUA_FLOAT64, BAGUA_MAX, comm, nullptr));
      if (rank == 0) {
        std::printf("epoch %2d  loss %.6f  accuracy %.2f%%  step %.2f ms  sent %.1f KiB/step", epoch, loss, 100 * acc,
                    1e3 * max_step_s, bytes / 1024.0 / steps_per_epoch);
        std::printf(o.elastic ? "  ranks %d\n" : "\n", n);
      }
      std::fflush(stdout);
      final_loss = loss, final_acc = acc;
      total_step_s += max_step_s * steps_per_epoch;
      total_bytes += bytes;
      total_steps += steps_per_epoch;
      ++epoch;
      s = 0;
      epoch_started = false;
    } catch (const PeerLost& lost) {
      bagua_status_t status = lost.status;
      for (;;) {  // a peer lost during the recovery: shrink again
        try {
          recover(status);
          break;
        } catch (const PeerLost& again) {
          status = again.status;
        }
      }
    }
  }
  g_elastic = false;  // from here a failure ends the run
  if (async) {        // stop averaging, then one exact average so that every rank ends with the same model
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
  if (sched) {
    CHECK(bagua_scheduler_get_info(sched, &info));
    if (rank == 0 && o.autotune)
      std::printf("scheduler: %d buckets of at most %llu bytes, %s, %s after %llu decisions\n", info.buckets,
                  static_cast<unsigned long long>(info.bucket_bytes), info.hierarchical ? "hierarchical" : "flat",
                  info.settled ? "settled" : "still tuning", static_cast<unsigned long long>(info.decisions));
    CHECK(bagua_scheduler_destroy(sched));
  }
  if (rank == 0)
    std::printf(
        "summary algorithm=%s ranks=%d loss=%.6f accuracy=%.4f step_ms=%.3f bytes_per_step=%.0f weights=%016llx\n",
        o.algorithm.c_str(), n, final_loss, final_acc, 1e3 * total_step_s / total_steps,
        static_cast<double>(total_bytes) / total_steps,
        static_cast<unsigned long long>(fnv1a(model.w.data(), p * sizeof(float))));
  CHECK(bagua_comm_destroy(comm));
  return 0;
}

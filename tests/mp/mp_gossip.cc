// Under bagua-run -n N: gossip averaging, low-precision decentralized SGD and asynchronous averaging.
//   flat | hier | netns   (hier: BAGUA_HOST_ID puts ranks 2k and 2k+1 on one logical host, needs an even N;
//   netns: the same layout from real test-bed hosts, 2 ranks per host)
// Oracles:
//  - one step on x_r = r + (i mod 3) against the documented weights, written out here independently of the
//    library (ring 1/3, exponential 1/(1+deg), one-peer exponential 1/2, shift-one 1/2, full 1/n), within 2 ulp;
//  - doubly stochastic graphs keep the mean within n eps; one-peer exponential with n = 2^k gives the exact
//    average after k steps; on the ring the consensus error shrinks by |lambda_2| = max |1 + 2 cos(2 pi k/n)|/3
//    per step (bound checked every step, and the last ratio within 2% of it);
//  - lpdec: after every step rank i's replica of its left neighbour is bit-equal to that neighbour's own;
//    least squares converges;
//  - async: rounds advance, least squares converges, 50 runs with random stop times all end.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "mp/mp_check.h"

namespace {
int g_rank, g_size;
bool g_hier;

int mod(long long a, int n) { return static_cast<int>(((a % n) + n) % n); }
int ceil_log2(int n) {
  int k = 0;
  while ((1 << k) < n) ++k;
  return k;
}

// The documented graphs: rank r's (in-neighbour, weight) list and own weight, over `n` nodes at step s.
struct Row {
  double self;
  std::vector<std::pair<int, double>> in;
};
Row documented(bagua_topology_kind_t kind, int n, int r, uint64_t s) {
  if (n == 1) return {1.0, {}};
  switch (kind) {
    case BAGUA_TOPO_RING:
      if (n == 2) return {0.5, {{1 - r, 0.5}}};
      return {1.0 / 3, {{mod(r - 1, n), 1.0 / 3}, {mod(r + 1, n), 1.0 / 3}}};
    case BAGUA_TOPO_EXPONENTIAL: {
      Row row{0, {}};
      int degree = ceil_log2(n);
      for (int k = 0; (1 << k) < n; ++k) row.in.push_back({mod(r - (1 << k), n), 1.0 / (1 + degree)});
      row.self = 1.0 / (1 + degree);
      return row;
    }
    case BAGUA_TOPO_ONE_PEER_EXPONENTIAL: {
      int k = static_cast<int>(s % ceil_log2(n));
      return {0.5, {{mod(r - (1 << k), n), 0.5}}};
    }
    case BAGUA_TOPO_SHIFT_ONE: {
      int half = n / 2;
      long long st = static_cast<long long>(s);
      int peer = r < half ? mod(st + r, half) + half : mod(r - half - st, half);
      return {0.5, {{peer, 0.5}}};
    }
    case BAGUA_TOPO_FULL: {
      Row row{1.0 / n, {}};
      for (int j = 0; j < n; ++j)
        if (j != r) row.in.push_back({j, 1.0 / n});
      return row;
    }
  }
  return {1.0, {}};
}

float input_value(int r, size_t i) { return static_cast<float>(r + static_cast<int>(i % 3)); }

bool within_ulps(float got, double want, int ulps) {
  double unit = std::ldexp(1.0, std::ilogb(std::max(std::fabs(want), 1e-30)) - 23);
  return std::fabs(got - want) <= ulps * unit;
}

const bagua_topology_kind_t kKinds[] = {BAGUA_TOPO_RING, BAGUA_TOPO_EXPONENTIAL, BAGUA_TOPO_ONE_PEER_EXPONENTIAL,
                                        BAGUA_TOPO_SHIFT_ONE, BAGUA_TOPO_FULL};

void check_one_step(bagua_comm_t comm) {
  const size_t count = 1001;
  int checked = 0;
  for (bagua_topology_kind_t kind : kKinds) {
    bagua_topology_t topo;
    bagua_status_t st = bagua_topology_create(comm, kind, &topo);
    if (kind == BAGUA_TOPO_SHIFT_ONE && g_size % 2 == 1) {
      MP_CHECK(st == BAGUA_ERR_INVALID_ARGUMENT);
      continue;
    }
    MP_OK(st);
    MP_OK(bagua_topology_check(topo));
    for (uint64_t step = 0; step < 4; ++step) {
      std::vector<float> x(count), out(count);
      for (size_t i = 0; i < count; ++i) x[i] = input_value(g_rank, i);
      MP_OK(bagua_neighbor_allreduce(x.data(), out.data(), count, BAGUA_FLOAT32, topo, step, comm, nullptr));
      Row row = documented(kind, g_size, g_rank, step);
      for (size_t i = 0; i < count; ++i) {
        double want = row.self * input_value(g_rank, i);
        for (auto& [j, w] : row.in) want += w * input_value(j, i);
        if (!within_ulps(out[i], want, 2)) {
          std::fprintf(stderr, "rank %d kind %d step %llu element %zu: got %.9g want %.9g\n", g_rank, kind,
                       (unsigned long long)step, i, out[i], want);
          std::exit(1);
        }
      }
      // In place, fp64 and the non-blocking form agree.
      MP_OK(bagua_neighbor_allreduce(x.data(), x.data(), count, BAGUA_FLOAT32, topo, step, comm, nullptr));
      MP_CHECK(x == out);
      std::vector<double> xd(count), outd(count);
      for (size_t i = 0; i < count; ++i) xd[i] = input_value(g_rank, i);
      bagua_request_t req;
      MP_OK(bagua_ineighbor_allreduce(xd.data(), outd.data(), count, BAGUA_FLOAT64, topo, step, comm, &req));
      MP_OK(bagua_wait(req));
      for (size_t i = 0; i < count; ++i) {
        double want = row.self * xd[i];
        for (auto& [j, w] : row.in) want += w * input_value(j, i);
        MP_CHECK(std::fabs(outd[i] - want) <= 4e-15 * std::max(1.0, std::fabs(want)));
      }
      ++checked;
    }
    MP_OK(bagua_topology_destroy(topo));
  }
  if (g_rank == 0) std::printf("one step on x_r = r: %d topology x step cases within 2 ulp\n", checked);
}

double mean_over_ranks(const std::vector<float>& x, bagua_comm_t comm) {
  double s = 0;
  for (float v : x) s += v;
  MP_OK(bagua_allreduce(&s, &s, 1, BAGUA_FLOAT64, BAGUA_SUM, comm, nullptr));
  return s / (static_cast<double>(g_size) * x.size());
}

void check_mean_and_consensus(bagua_comm_t comm) {
  const size_t count = 4096;
  std::mt19937 rng(99 + g_rank);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> x0(count);
  for (float& v : x0) v = u(rng);
  const double mean0 = mean_over_ranks(x0, comm);
  for (bagua_topology_kind_t kind : kKinds) {  // all the built-in graphs are doubly stochastic
    if (kind == BAGUA_TOPO_SHIFT_ONE && g_size % 2) continue;
    bagua_topology_t topo;
    MP_OK(bagua_topology_create(comm, kind, &topo));
    std::vector<float> x = x0;
    MP_OK(bagua_neighbor_allreduce(x.data(), x.data(), count, BAGUA_FLOAT32, topo, 0, comm, nullptr));
    MP_CHECK(std::fabs(mean_over_ranks(x, comm) - mean0) <= g_size * 1.2e-7);
    MP_OK(bagua_topology_destroy(topo));
  }
  // One-peer exponential, n = 2^k: exact average after k steps.
  if ((g_size & (g_size - 1)) == 0) {
    bagua_topology_t topo;
    MP_OK(bagua_topology_create(comm, BAGUA_TOPO_ONE_PEER_EXPONENTIAL, &topo));
    std::vector<float> x(count);
    for (size_t i = 0; i < count; ++i) x[i] = input_value(g_rank, i);
    for (int s = 0; s < ceil_log2(g_size); ++s)
      MP_OK(bagua_neighbor_allreduce(x.data(), x.data(), count, BAGUA_FLOAT32, topo, s, comm, nullptr));
    for (size_t i = 0; i < count; ++i) {
      double want = (g_size - 1) / 2.0 + static_cast<double>(i % 3);
      MP_CHECK(x[i] == static_cast<float>(want));
    }
    MP_OK(bagua_topology_destroy(topo));
  }
  // Ring: consensus error shrinks by |lambda_2| per step.
  if (g_size >= 3) {
    double lambda2 = 0;
    for (int k = 1; k < g_size; ++k)
      lambda2 = std::max(lambda2, std::fabs(1 + 2 * std::cos(2 * M_PI * k / g_size)) / 3);
    bagua_topology_t topo;
    MP_OK(bagua_topology_create(comm, BAGUA_TOPO_RING, &topo));
    std::vector<double> x(count), mean(count);
    for (size_t i = 0; i < count; ++i) x[i] = x0[i];
    auto consensus_error = [&] {
      MP_OK(bagua_allreduce(x.data(), mean.data(), count, BAGUA_FLOAT64, BAGUA_AVG, comm, nullptr));
      double e = 0;
      for (size_t i = 0; i < count; ++i) e += (x[i] - mean[i]) * (x[i] - mean[i]);
      MP_OK(bagua_allreduce(&e, &e, 1, BAGUA_FLOAT64, BAGUA_SUM, comm, nullptr));
      return std::sqrt(e);
    };
    double e0 = consensus_error(), prev = e0, ratio = 0;
    const int steps = 12;
    for (int t = 1; t <= steps; ++t) {
      MP_OK(bagua_neighbor_allreduce(x.data(), x.data(), count, BAGUA_FLOAT64, topo, t, comm, nullptr));
      double e = consensus_error();
      MP_CHECK(e <= std::pow(lambda2, t) * e0 * (1 + 1e-9) + 1e-12);  // n = 3: lambda_2 = 0, exact at once
      ratio = e / prev;
      prev = e;
    }
    if (lambda2 > 0.1) MP_CHECK(std::fabs(ratio - lambda2) <= 0.02 * lambda2);
    if (g_rank == 0)
      std::printf("ring consensus: error ratio per step %.4f against |lambda_2| = %.4f\n", ratio, lambda2);
    MP_OK(bagua_topology_destroy(topo));
  }
  if (g_rank == 0) std::printf("mean kept, one-peer exponential exact, ring at the spectral rate: ok\n");
}

void check_user_graphs(bagua_comm_t comm) {
  if (g_size >= 3) {  // a ring given as edges with Metropolis-Hastings weights (degree 2: 1/3) is BAGUA_TOPO_RING
    std::vector<int> src, dst;
    for (int r = 0; r < g_size; ++r) {
      src.push_back(r), dst.push_back((r + 1) % g_size);
      src.push_back((r + 1) % g_size), dst.push_back(r);
    }
    bagua_topology_t mh, ring;
    MP_OK(
        bagua_topology_create_from_edges(comm, static_cast<int>(src.size()), src.data(), dst.data(), nullptr, 1, &mh));
    MP_OK(bagua_topology_check(mh));
    MP_OK(bagua_topology_create(comm, BAGUA_TOPO_RING, &ring));
    std::vector<float> x(777), a(777), b(777);
    for (size_t i = 0; i < x.size(); ++i) x[i] = input_value(g_rank, i) * 0.37f;
    MP_OK(bagua_neighbor_allreduce(x.data(), a.data(), x.size(), BAGUA_FLOAT32, mh, 0, comm, nullptr));
    MP_OK(bagua_neighbor_allreduce(x.data(), b.data(), x.size(), BAGUA_FLOAT32, ring, 0, comm, nullptr));
    MP_CHECK(a == b);
    MP_OK(bagua_topology_destroy(mh));
    MP_OK(bagua_topology_destroy(ring));
    // A one-way star into rank 0 with weight 0.25 per edge (rank 0 keeps the rest).
    std::vector<int> s2, d2;
    std::vector<double> w2;
    for (int r = 1; r < g_size && r < 4; ++r) s2.push_back(r), d2.push_back(0), w2.push_back(0.25);
    bagua_topology_t star;
    MP_OK(
        bagua_topology_create_from_edges(comm, static_cast<int>(s2.size()), s2.data(), d2.data(), w2.data(), 0, &star));
    MP_OK(bagua_neighbor_allreduce(x.data(), a.data(), x.size(), BAGUA_FLOAT32, star, 0, comm, nullptr));
    for (size_t i = 0; i < x.size(); ++i) {
      double want = x[i];
      if (g_rank == 0) {
        want = (1 - 0.25 * s2.size()) * x[i];
        for (int r : s2) want += 0.25 * (input_value(r, i) * 0.37f);
      }
      MP_CHECK(within_ulps(a[i], want, 2));
    }
    MP_OK(bagua_topology_destroy(star));
  }
  // Ranks holding different graphs: bagua_topology_check says so on every rank.
  if (g_size >= 2) {
    int src = 0, dst = 1;
    double w = g_rank == 0 ? 0.5 : 0.25;
    bagua_topology_t odd;
    MP_OK(bagua_topology_create_from_edges(comm, 1, &src, &dst, &w, 0, &odd));
    MP_CHECK(bagua_topology_check(odd) == BAGUA_ERR_INVALID_USAGE);
    MP_CHECK(std::strstr(bagua_get_last_error(comm), "different topologies") != nullptr);
    MP_OK(bagua_topology_destroy(odd));
  }
  // Bad input.
  bagua_topology_t t;
  MP_CHECK(bagua_topology_create(comm, static_cast<bagua_topology_kind_t>(42), &t) == BAGUA_ERR_INVALID_ARGUMENT);
  int bad_src = g_size, bad_dst = 0;
  double w = 0.5;
  MP_CHECK(bagua_topology_create_from_edges(comm, 1, &bad_src, &bad_dst, &w, 0, &t) == BAGUA_ERR_INVALID_ARGUMENT);
  MP_CHECK(bagua_neighbor_allreduce(nullptr, nullptr, 1, BAGUA_FLOAT32, nullptr, 0, comm, nullptr) ==
           BAGUA_ERR_INVALID_ARGUMENT);
  MP_OK(bagua_topology_create(comm, BAGUA_TOPO_RING, &t));
  std::vector<int> ints(10);
  MP_CHECK(bagua_neighbor_allreduce(ints.data(), ints.data(), 10, BAGUA_INT32, t, 0, comm, nullptr) ==
           BAGUA_ERR_INVALID_ARGUMENT);
  MP_OK(bagua_topology_destroy(t));
  if (g_rank == 0) std::printf("user graphs, Metropolis-Hastings, topology check, bad input: ok\n");
}

// Hierarchical: host average, ring between hosts, broadcast in the host.
void check_hierarchical(bagua_comm_t comm) {
  const int hosts = g_size / 2;
  bagua_topology_t topo;
  MP_OK(bagua_topology_create(comm, BAGUA_TOPO_RING, &topo));
  MP_OK(bagua_topology_set_hierarchical(topo, 1));
  MP_OK(bagua_topology_check(topo));
  const size_t count = 999;
  std::vector<float> x(count), out(count);
  for (size_t i = 0; i < count; ++i) x[i] = input_value(g_rank, i);
  MP_OK(bagua_neighbor_allreduce(x.data(), out.data(), count, BAGUA_FLOAT32, topo, 0, comm, nullptr));
  Row row = documented(BAGUA_TOPO_RING, hosts, g_rank / 2, 0);
  auto host_avg = [](int h, size_t i) { return (input_value(2 * h, i) + input_value(2 * h + 1, i)) / 2.0; };
  for (size_t i = 0; i < count; ++i) {
    double want = row.self * host_avg(g_rank / 2, i);
    for (auto& [j, w] : row.in) want += w * host_avg(j, i);
    MP_CHECK(within_ulps(out[i], want, 2));
  }
  MP_OK(bagua_topology_destroy(topo));
  if (g_rank == 0) std::printf("hierarchical ring over %d hosts: ok\n", hosts);
}

// Least squares with rows dealt to ranks (same model everywhere): local loss and gradient.
struct LeastSquares {
  size_t d = 64, rows = 128;
  std::vector<float> a, b;
  explicit LeastSquares(int rank) {
    std::mt19937_64 rng(500 + rank), truth(5);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> w(d);
    for (float& v : w) v = normal(truth);
    a.resize(rows * d);
    b.assign(rows, 0.0f);
    for (float& v : a) v = normal(rng);
    for (size_t i = 0; i < rows; ++i)
      for (size_t j = 0; j < d; ++j) b[i] += a[i * d + j] * w[j];
  }
  double loss_grad(const float* x, float* grad) const {
    double loss = 0;
    if (grad) std::fill(grad, grad + d, 0.0f);
    for (size_t i = 0; i < rows; ++i) {
      float r = -b[i];
      for (size_t j = 0; j < d; ++j) r += a[i * d + j] * x[j];
      loss += 0.5 * r * r / rows;
      if (grad)
        for (size_t j = 0; j < d; ++j) grad[j] += r * a[i * d + j] / rows;
    }
    return loss;
  }
};

double global_loss(const LeastSquares& p, const float* x, bagua_comm_t comm) {
  double l = p.loss_grad(x, nullptr);
  MP_OK(bagua_allreduce(&l, &l, 1, BAGUA_FLOAT64, BAGUA_AVG, comm, nullptr));
  return l;
}

void check_lpdec(bagua_comm_t comm) {
  LeastSquares p(g_rank);
  bagua_compression_t cfg = BAGUA_COMPRESSION_INITIALIZER;
  cfg.bits = 8;
  cfg.chunk = 256;
  std::vector<float> x(p.d, 0.0f), grad(p.d), replica(p.d), theirs(p.d);
  bagua_lpdec_t lp;
  MP_OK(bagua_lpdec_create(comm, p.d, &cfg, x.data(), &lp));
  double initial = global_loss(p, x.data(), comm);
  const int left = (g_rank + g_size - 1) % g_size, right = (g_rank + 1) % g_size;
  for (int t = 0; t < 300; ++t) {
    p.loss_grad(x.data(), grad.data());
    for (size_t j = 0; j < p.d; ++j) x[j] -= 0.1f * grad[j];
    MP_OK(bagua_lpdec_step(lp, x.data()));
    if (g_size > 1) {  // my replica of my left neighbour == its own replica, bit for bit
      MP_OK(bagua_lpdec_replica(lp, 0, replica.data(), p.d));
      MP_OK(bagua_group_start());
      MP_OK(bagua_send(replica.data(), p.d, BAGUA_FLOAT32, right, comm, nullptr));
      MP_OK(bagua_recv(theirs.data(), p.d, BAGUA_FLOAT32, left, comm, nullptr));
      MP_OK(bagua_group_end());
      MP_OK(bagua_lpdec_replica(lp, -1, replica.data(), p.d));
      MP_CHECK(std::memcmp(replica.data(), theirs.data(), p.d * 4) == 0);
    }
  }
  double final_loss = global_loss(p, x.data(), comm);
  if (g_rank == 0)
    std::printf("lpdec (8-bit, ring): least squares loss %.4g -> %.4g in 300 steps, replicas bit-equal\n", initial,
                final_loss);
  MP_CHECK(final_loss < 1e-3 * initial);
  MP_OK(bagua_lpdec_destroy(lp));
}

void check_async(bagua_comm_t comm) {
  // Rounds advance while the caller trains; least squares converges.
  LeastSquares p(g_rank);
  std::vector<float> x(p.d, 0.0f), grad(p.d);
  bagua_async_average_t handle;
  MP_OK(bagua_async_average_start(comm, x.data(), p.d, BAGUA_FLOAT32, 1, &handle));
  MP_OK(bagua_async_average_lock(handle));  // the averaging thread writes x under this lock
  double initial = p.loss_grad(x.data(), nullptr);
  MP_OK(bagua_async_average_unlock(handle));
  for (int t = 0; t < 400; ++t) {
    MP_OK(bagua_async_average_lock(handle));
    p.loss_grad(x.data(), grad.data());
    for (size_t j = 0; j < p.d; ++j) x[j] -= 0.1f * grad[j];
    MP_OK(bagua_async_average_unlock(handle));
    if (t % 50 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  uint64_t rounds = 0;
  MP_OK(bagua_async_average_stats(handle, &rounds));
  MP_OK(bagua_async_average_stop(handle));
  double final_loss = global_loss(p, x.data(), comm);
  MP_CHECK(g_size == 1 || rounds > 0);
  MP_CHECK(final_loss < 1e-3 * initial);
  // The caller's communicator still works alongside.
  MP_OK(bagua_barrier(comm, nullptr));
  if (g_rank == 0)
    std::printf("async averaging: %llu rounds, least squares %.4g -> %.4g\n", (unsigned long long)rounds, initial,
                final_loss);
  // Misuse is refused without side effects: unlock without the lock, stop while holding it (it would wait
  // forever for the averaging thread), a second lock from the same thread.
  {
    std::vector<float> buf(100, 1.0f);
    MP_OK(bagua_async_average_start(comm, buf.data(), buf.size(), BAGUA_FLOAT32, 0, &handle));
    MP_CHECK(bagua_async_average_unlock(handle) == BAGUA_ERR_INVALID_USAGE);
    MP_OK(bagua_async_average_lock(handle));
    MP_CHECK(bagua_async_average_lock(handle) == BAGUA_ERR_INVALID_USAGE);
    MP_CHECK(bagua_async_average_stop(handle) == BAGUA_ERR_INVALID_USAGE);
    MP_CHECK(std::strstr(bagua_get_last_error(nullptr), "unlock first") != nullptr ||
             std::strstr(bagua_get_last_error(comm), "unlock first") != nullptr);
    MP_OK(bagua_async_average_unlock(handle));
    MP_OK(bagua_async_average_stop(handle));
    MP_CHECK(bagua_async_average_start(comm, buf.data(), buf.size(), BAGUA_INT32, 0, &handle) ==
             BAGUA_ERR_INVALID_ARGUMENT);
    // An interval the peers' rounds could not wait for (not below the timeout) is refused before the split.
    MP_CHECK(bagua_async_average_start(comm, buf.data(), buf.size(), BAGUA_FLOAT32, 1 << 30, &handle) ==
             BAGUA_ERR_INVALID_ARGUMENT);
    MP_CHECK(std::strstr(bagua_get_last_error(comm), "BAGUA_TIMEOUT") != nullptr);
    // stop does not use the communicator the averaging started from, which may be destroyed first.
    bagua_comm_t parent = nullptr;
    MP_OK(bagua_comm_split(comm, 0, g_rank, &parent));
    MP_OK(bagua_async_average_start(parent, buf.data(), buf.size(), BAGUA_FLOAT32, 0, &handle));
    MP_OK(bagua_comm_destroy(parent));
    MP_OK(bagua_async_average_stop(handle));
  }
  // 50 runs, each rank stopping after its own random delay (seeded): every run ends.
  std::mt19937 rng(4242 + g_rank);
  std::uniform_int_distribution<int> delay(0, 30);
  auto begin = std::chrono::steady_clock::now();
  for (int run = 0; run < 50; ++run) {
    std::vector<float> buf(1000, static_cast<float>(g_rank));
    MP_OK(bagua_async_average_start(comm, buf.data(), buf.size(), BAGUA_FLOAT32, 0, &handle));
    int ms = delay(rng);
    if (run % 10 == 0 && g_rank == run / 10 % g_size) ms = 300;  // now and then one rank is much slower
    std::this_thread::sleep_for(std::chrono::milliseconds(ms));
    MP_OK(bagua_async_average_stop(handle));
  }
  if (g_rank == 0)
    std::printf("async averaging: 50 runs with random stop times ended in %.1f s\n", mp_seconds_since(begin));
}

}  // namespace

int main(int argc, char** argv) {
  std::string mode = argc > 1 ? argv[1] : "flat";
  g_hier = mode == "hier" || mode == "netns";
  if (mode == "hier") mp_pair_ranks_on_logical_hosts("ghost");
  bagua_comm_t comm;
  MP_OK(bagua_comm_init_from_env(&comm));
  MP_OK(bagua_comm_rank(comm, &g_rank));
  MP_OK(bagua_comm_size(comm, &g_size));
  if (g_hier) {
    check_hierarchical(comm);
  } else {
    check_one_step(comm);
    check_mean_and_consensus(comm);
    check_user_graphs(comm);
    if (g_size <= 4) {
      check_lpdec(comm);
      check_async(comm);
    }
  }
  MP_OK(bagua_comm_destroy(comm));
  if (g_rank == 0) std::printf("mp_gossip %s on %d ranks: ok\n", mode.c_str(), g_size);
  return 0;
}

// Under bagua-run -n N: bagua_quantized_allreduce.
//   flat | hier | netns   (hier: BAGUA_HOST_ID puts ranks 2k and 2k+1 on one logical host; netns: the
//   same layout from real test-bed hosts, 2 ranks per host, over shaped links)
// Oracles (every rank regenerates every rank's input from its seed, so each checks the whole result):
//  - identical: all ranks' outputs hash the same (allreduce of the hash with MIN and MAX).
//  - error bound, per min-max chunk of the owner's block, L = 2^b - 1, R_r = range of rank r's chunk:
//      sum_{r != owner} R_r / 2L            (the workers' compression)
//    + (R_sum + 2 sum R_r / 2L) / 2L       (the owner's recompression of a sum whose range grew by at most that)
//    + fp32 accumulation rounding (a few ulp of the sum of |inputs| per element, per step of the sum).
//    Stochastic rounding doubles each term (a code may land on either neighbour). For hierarchical runs the
//    "ranks" of this bound are the hosts and their inputs the full-precision host sums; in the rail form (hosts of
//    equal size) the blocks are those of each host-rank slice.
//  - error feedback telescopes: sum_t out_t + sum_ranks residual_T = sum_t exact_t (within float tolerance).
//  - convergence: least squares by SGD on the averaged gradient (fixed seeds); 1-bit sign with error feedback
//    ends within 1e-3 of full precision's loss, and without error feedback it is measurably worse.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "common/exact_data.h"
#include "mp/mp_check.h"

using namespace bagua::testing;

namespace {
int g_rank, g_size;
bool g_hier;

// Rank r's input: values of a different scale per rank and per region, so chunk ranges differ.
std::vector<float> input_of(int r, size_t count, uint64_t seed) {
  std::mt19937_64 rng(seed * 7919 + r);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> x(count);
  for (size_t i = 0; i < count; ++i) x[i] = u(rng) * (1.0f + static_cast<float>((i / 300 + r) % 5));
  return x;
}

void check_identical(const void* data, size_t bytes, bagua_comm_t comm) {
  uint64_t hash = fnv1a(data, bytes), lo = hash, hi = hash;
  MP_OK(bagua_allreduce(&lo, &lo, 1, BAGUA_UINT64, BAGUA_MIN, comm, nullptr));
  MP_OK(bagua_allreduce(&hi, &hi, 1, BAGUA_UINT64, BAGUA_MAX, comm, nullptr));
  MP_CHECK(lo == hash && hi == hash);
}

// The ranks whose inputs are compressed (one per logical host when hierarchical) and each one's fp32 input.
struct Contributors {
  std::vector<std::vector<float>> inputs;
};

Contributors contributors(size_t count, uint64_t seed) {
  Contributors c;
  if (!g_hier) {
    for (int r = 0; r < g_size; ++r) c.inputs.push_back(input_of(r, count, seed));
    return c;
  }
  for (int leader = 0; leader < g_size; leader += 2) {  // the leader's own input first, then its host peer's
    std::vector<float> sum = input_of(leader, count, seed);
    if (leader + 1 < g_size) {
      std::vector<float> peer = input_of(leader + 1, count, seed);
      for (size_t i = 0; i < count; ++i) sum[i] += peer[i];
    }
    c.inputs.push_back(std::move(sum));
  }
  return c;
}

size_t block_begin(size_t count, int m, int b) {
  size_t base = count / m, extra = count % m;
  return b * base + std::min<size_t>(b, extra);
}

double range_of(const float* x, size_t n) {
  if (n == 0) return 0;
  auto [lo, hi] = std::minmax_element(x, x + n);
  return static_cast<double>(*hi) - *lo;
}

// Checks out[] (sum, or avg when avg) against the bound above; returns the largest error / bound seen.
double check_bound(const std::vector<float>& out, size_t count, int bits, size_t chunk, bool stochastic, bool avg,
                   uint64_t seed) {
  Contributors c = contributors(count, seed);
  const int m = static_cast<int>(c.inputs.size());
  const double L = std::ldexp(1.0, bits) - 1, spread = stochastic ? 2.0 : 1.0;
  double worst = 0;
  // The owners' blocks: m of the vector, or in the rail form (every logical host has 2 ranks) m of each of the 2
  // slices.
  const int slices = g_hier && g_size % 2 == 0 ? 2 : 1;
  for (int block = 0; block < m * slices; ++block) {
    const int owner = block % m;
    const size_t slice = block_begin(count, slices, block / m),
                 slice_len = block_begin(count, slices, block / m + 1) - slice;
    size_t begin = slice + block_begin(slice_len, m, owner), end = slice + block_begin(slice_len, m, owner + 1);
    for (size_t cb = begin; cb < end; cb += chunk) {
      size_t len = std::min(chunk, end - cb);
      double inputs_err = 0, sum_range, biggest = 0;
      std::vector<double> exact(len, 0.0), magnitude(len, 0.0);
      for (int r = 0; r < m; ++r) {
        if (r != owner) inputs_err += spread * range_of(c.inputs[r].data() + cb, len) / (2 * L);
        for (size_t i = 0; i < len; ++i)
          exact[i] += c.inputs[r][cb + i], magnitude[i] += std::fabs(c.inputs[r][cb + i]);
      }
      auto [lo, hi] = std::minmax_element(exact.begin(), exact.end());
      sum_range = *hi - *lo;
      for (double v : magnitude) biggest = std::max(biggest, v);
      double bound = inputs_err + spread * (sum_range + 2 * inputs_err) / (2 * L) + 4.0 * m * biggest * 6e-8;
      for (size_t i = 0; i < len; ++i) {
        double want = avg ? exact[i] / g_size : exact[i];
        double err = std::fabs(out[cb + i] - want), b = avg ? bound / g_size : bound;
        if (!(err <= b)) {
          std::fprintf(stderr,
                       "rank %d: element %zu: got %.9g want %.9g, error %.3g > bound %.3g (bits %d chunk %zu)\n",
                       g_rank, cb + i, out[cb + i], want, err, b, bits, chunk);
          std::exit(1);
        }
        if (b > 0) worst = std::max(worst, err / b);
      }
    }
  }
  return worst;
}

bagua_compression_t minmax_cfg(int bits, size_t chunk, bool stochastic = false) {
  bagua_compression_t cfg = BAGUA_COMPRESSION_INITIALIZER;
  cfg.bits = bits;
  cfg.chunk = chunk;
  cfg.stochastic = stochastic;
  cfg.seed = 42;
  cfg.hierarchical = g_hier ? BAGUA_HIERARCHICAL_ON : BAGUA_HIERARCHICAL_OFF;
  return cfg;
}

void check_minmax_bounds(bagua_comm_t comm) {
  const size_t counts[] = {0, 1, 7, 1000, 100003};
  double worst = 0;
  int cases = 0;
  for (int bits : {1, 2, 4, 8})
    for (size_t chunk : {256, 1024})
      for (size_t count : counts)
        for (bool avg : {false, true})
          for (bool stochastic : {false, true}) {
            if (stochastic && (avg || chunk != 256)) continue;
            uint64_t seed = bits * 1000 + chunk + count;
            std::vector<float> x = input_of(g_rank, count, seed), out(count + 1, -7.0f);
            std::vector<float> original = x;
            bagua_compression_t cfg = minmax_cfg(bits, chunk, stochastic);
            MP_OK(bagua_quantized_allreduce(x.data(), out.data(), count, BAGUA_FLOAT32, avg ? BAGUA_AVG : BAGUA_SUM,
                                            &cfg, nullptr, comm, nullptr));
            MP_CHECK(x == original);        // sendbuf untouched
            MP_CHECK(out[count] == -7.0f);  // nothing written past the end
            out.resize(count);
            check_identical(out.data(), count * 4, comm);
            worst = std::max(worst, check_bound(out, count, bits, chunk, stochastic, avg, seed));
            ++cases;
          }
  // In place gives the same bits as out of place.
  const size_t count = 5003;
  bagua_compression_t cfg = minmax_cfg(4, 512);
  std::vector<float> a = input_of(g_rank, count, 9), b(count);
  MP_OK(bagua_quantized_allreduce(a.data(), b.data(), count, BAGUA_FLOAT32, BAGUA_SUM, &cfg, nullptr, comm, nullptr));
  MP_OK(bagua_quantized_allreduce(a.data(), a.data(), count, BAGUA_FLOAT32, BAGUA_SUM, &cfg, nullptr, comm, nullptr));
  MP_CHECK(a == b);
  if (g_rank == 0) std::printf("minmax bound: %d cases, worst error/bound %.3f\n", cases, worst);
}

// Sign, fp16 and bf16 kinds, and fp16/bf16 buffers: identical outputs and their own bounds.
void check_other_kinds(bagua_comm_t comm) {
  const size_t count = 30011;
  Contributors c = contributors(count, 5);
  std::vector<double> exact(count, 0.0);
  for (const auto& in : c.inputs)
    for (size_t i = 0; i < count; ++i) exact[i] += in[i];
  for (int kind : {BAGUA_COMPRESS_FP16, BAGUA_COMPRESS_BF16, BAGUA_COMPRESS_SIGN}) {
    bagua_compression_t cfg = minmax_cfg(8, 1024);
    cfg.kind = kind;
    std::vector<float> x = input_of(g_rank, count, 5), out(count);
    MP_OK(
        bagua_quantized_allreduce(x.data(), out.data(), count, BAGUA_FLOAT32, BAGUA_SUM, &cfg, nullptr, comm, nullptr));
    check_identical(out.data(), count * 4, comm);
    if (kind == BAGUA_COMPRESS_SIGN) {
      // Sign keeps the direction only: the output is positively correlated with the exact sum.
      double dot = 0;
      for (size_t i = 0; i < count; ++i) dot += out[i] * exact[i];
      MP_CHECK(dot > 0);
      continue;
    }
    // Each input rounds once (relative 2^-p) and the sum once more; p = 11 (fp16) or 8 (bf16).
    double u = kind == BAGUA_COMPRESS_FP16 ? std::ldexp(1.0, -11) : std::ldexp(1.0, -8);
    for (size_t i = 0; i < count; ++i) {
      double in_err = 0, biggest = 0;
      for (const auto& in : c.inputs)
        in_err += std::fabs(in[i]) * u, biggest = std::max(biggest, (double)std::fabs(in[i]));
      double bound = 2 * in_err + std::fabs(exact[i]) * u + 1e-6 * biggest;
      MP_CHECK(std::fabs(out[i] - exact[i]) <= bound);
    }
  }
  // fp16 / bf16 buffers: accumulated in fp32, rounded once to the buffer type; identical everywhere.
  for (bagua_datatype_t dtype : {BAGUA_FLOAT16, BAGUA_BFLOAT16}) {
    std::vector<uint16_t> buf(count);
    std::vector<float> x = input_of(g_rank, count, 6);
    for (size_t i = 0; i < count; ++i) store_value(buf.data(), i, dtype, x[i]);
    bagua_compression_t cfg = minmax_cfg(8, 1024);
    MP_OK(bagua_quantized_allreduce(buf.data(), buf.data(), count, dtype, BAGUA_AVG, &cfg, nullptr, comm, nullptr));
    check_identical(buf.data(), count * 2, comm);
  }
  if (g_rank == 0) std::printf("sign/fp16/bf16 kinds and half buffers: ok\n");
}

// Error feedback: over T steps, sum of outputs + sum over ranks of the residuals = sum of exact sums.
void check_error_feedback(bagua_comm_t comm) {
  const size_t count = 20000;
  const int steps = 30;
  for (int kind : {BAGUA_COMPRESS_MINMAX, BAGUA_COMPRESS_SIGN}) {
    bagua_compression_t cfg = minmax_cfg(kind == BAGUA_COMPRESS_MINMAX ? 2 : 8, 512);
    cfg.kind = kind;
    cfg.error_feedback = 1;
    bagua_qstate_t state;
    MP_OK(bagua_qstate_create(comm, count, BAGUA_FLOAT32, &cfg, &state));
    std::vector<double> sum_out(count, 0.0), sum_exact(count, 0.0);
    double scale = 0;
    for (int t = 0; t < steps; ++t) {
      std::vector<float> out(count);
      for (int r = 0; r < g_size; ++r) {
        std::vector<float> x = input_of(r, count, 100 + t);
        for (size_t i = 0; i < count; ++i) sum_exact[i] += x[i], scale = std::max(scale, (double)std::fabs(x[i]));
      }
      std::vector<float> mine = input_of(g_rank, count, 100 + t);
      MP_OK(bagua_quantized_allreduce(mine.data(), out.data(), count, BAGUA_FLOAT32, BAGUA_SUM, &cfg, state, comm,
                                      nullptr));
      for (size_t i = 0; i < count; ++i) sum_out[i] += out[i];
    }
    std::vector<float> residual(count);
    MP_OK(bagua_qstate_residual(state, residual.data(), count));
    std::vector<double> total(residual.begin(), residual.end());
    MP_OK(bagua_allreduce(total.data(), total.data(), count, BAGUA_FLOAT64, BAGUA_SUM, comm, nullptr));
    // fp32 rounding: each step's sums and residual updates round at most a few ulp of the values involved.
    double tol = steps * g_size * 8 * scale * 6e-8;
    double worst = 0, without_residual = 0;
    for (size_t i = 0; i < count; ++i) {
      worst = std::max(worst, std::fabs(sum_out[i] + total[i] - sum_exact[i]));
      without_residual = std::max(without_residual, std::fabs(sum_out[i] - sum_exact[i]));
    }
    MP_CHECK(worst <= tol);
    bool compressed = (g_hier ? (g_size + 1) / 2 : g_size) > 1;  // one contributor sends nothing compressed
    MP_CHECK(!compressed || without_residual > 100 * worst);     // the residual is what makes the identity hold
    MP_OK(bagua_qstate_destroy(state));
    if (g_rank == 0)
      std::printf(
          "error feedback (%s): |sum out + residual - sum exact| <= %.3g (tolerance %.3g; without the residual %.3g)\n",
          kind == BAGUA_COMPRESS_MINMAX ? "minmax 2-bit" : "sign", worst, tol, without_residual);
  }
}

// Least squares 0.5/N ||A w - b||^2, rank r's rows generated by w_true + its own shift; gradient descent on the
// averaged gradient.
double train(bagua_comm_t comm, int mode /* 0 full, 1 sign+EF, 2 sign without EF */, int steps) {
  const size_t d = 256, rows = 512;  // per rank
  std::mt19937_64 rng(2024 + g_rank);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::mt19937_64 truth_rng(7);
  std::vector<float> w_true(d), a(rows * d), b(rows, 0.0f), w(d, 0.0f), grad(d), avg(d);
  for (auto& v : w_true) v = normal(truth_rng);
  // Each rank's rows fit its own shifted model, so at the optimum the local gradients are far from zero:
  // compressing them without error feedback is biased there, and the bias does not vanish.
  for (auto& v : w_true) v += 0.1f * normal(rng);
  for (auto& v : a) v = normal(rng);  // the averaged Hessian A^T A / N has eigenvalues in about [0.4, 1.9]
  for (size_t i = 0; i < rows; ++i)
    for (size_t j = 0; j < d; ++j) b[i] += a[i * d + j] * w_true[j];
  bagua_compression_t cfg = minmax_cfg(8, 256);
  cfg.kind = BAGUA_COMPRESS_SIGN;
  cfg.hierarchical = BAGUA_HIERARCHICAL_OFF;
  cfg.error_feedback = mode == 1;
  bagua_qstate_t state = nullptr;
  if (mode == 1) MP_OK(bagua_qstate_create(comm, d, BAGUA_FLOAT32, &cfg, &state));
  auto loss_and_grad = [&](bool want_grad) {
    double local = 0;
    std::fill(grad.begin(), grad.end(), 0.0f);
    for (size_t i = 0; i < rows; ++i) {
      float r = -b[i];
      for (size_t j = 0; j < d; ++j) r += a[i * d + j] * w[j];
      local += 0.5 * r * r / rows;
      if (want_grad)
        for (size_t j = 0; j < d; ++j) grad[j] += r * a[i * d + j] / rows;
    }
    MP_OK(bagua_allreduce(&local, &local, 1, BAGUA_FLOAT64, BAGUA_AVG, comm, nullptr));
    return local;
  };
  for (int t = 0; t < steps; ++t) {
    // A decaying step: error feedback's offset of the iterate shrinks with it; the bias of compressing
    // without error feedback does not.
    const float lr = 0.3f / (1.0f + t / 50.0f);
    loss_and_grad(true);
    if (mode == 0)
      MP_OK(bagua_allreduce(grad.data(), avg.data(), d, BAGUA_FLOAT32, BAGUA_AVG, comm, nullptr));
    else
      MP_OK(
          bagua_quantized_allreduce(grad.data(), avg.data(), d, BAGUA_FLOAT32, BAGUA_AVG, &cfg, state, comm, nullptr));
    for (size_t j = 0; j < d; ++j) w[j] -= lr * avg[j];
  }
  if (state) MP_OK(bagua_qstate_destroy(state));
  check_identical(w.data(), d * 4, comm);
  return loss_and_grad(false);
}

void check_convergence(bagua_comm_t comm) {
  const int steps = mp_env_int("QSTEPS") > 0 ? mp_env_int("QSTEPS") : 800;
  double initial = train(comm, 0, 0);
  double full = train(comm, 0, steps), ef = train(comm, 1, steps), no_ef = train(comm, 2, steps);
  if (g_rank == 0)
    std::printf(
        "least squares, %d SGD steps on %d ranks: initial %.4g, full precision %.6f, 1-bit+EF %.6f, "
        "1-bit without EF %.6f\n",
        steps, g_size, initial, full, ef, no_ef);
  MP_CHECK(std::fabs(ef - full) < 1e-3);
  MP_CHECK(no_ef > full + 0.05);  // the gap: without error feedback it stalls away from the optimum
}

void check_nonblocking(bagua_comm_t comm) {
  const size_t count = 70001;
  bagua_compression_t cfg = minmax_cfg(8, 1024);
  std::vector<float> x = input_of(g_rank, count, 77), blocking(count), out(count);
  MP_OK(bagua_quantized_allreduce(x.data(), blocking.data(), count, BAGUA_FLOAT32, BAGUA_SUM, &cfg, nullptr, comm,
                                  nullptr));
  bagua_request_t req;
  MP_OK(bagua_iquantized_allreduce(x.data(), out.data(), count, BAGUA_FLOAT32, BAGUA_SUM, &cfg, nullptr, comm, &req));
  MP_OK(bagua_wait(req));
  MP_CHECK(out == blocking);
  // A state in use by a request in flight: every use of it is refused without side effects until it ends.
  bagua_compression_t ef = cfg;
  ef.error_feedback = 1;
  bagua_qstate_t state;
  MP_OK(bagua_qstate_create(comm, count, BAGUA_FLOAT32, &ef, &state));
  MP_OK(bagua_iquantized_allreduce(x.data(), out.data(), count, BAGUA_FLOAT32, BAGUA_SUM, &ef, state, comm, &req));
  std::vector<float> other(count), residual(count);
  MP_CHECK(bagua_quantized_allreduce(x.data(), other.data(), count, BAGUA_FLOAT32, BAGUA_SUM, &ef, state, comm,
                                     nullptr) == BAGUA_ERR_INVALID_USAGE);
  MP_CHECK(bagua_qstate_residual(state, residual.data(), count) == BAGUA_ERR_INVALID_USAGE);
  MP_CHECK(bagua_qstate_destroy(state) == BAGUA_ERR_INVALID_USAGE);
  MP_OK(bagua_wait(req));
  MP_CHECK(out == blocking);  // the first step with error feedback sends what the stateless call sends
  MP_OK(bagua_qstate_residual(state, residual.data(), count));
  MP_OK(bagua_qstate_destroy(state));
  // hierarchical = auto picks the hierarchical form exactly when hosts hold several ranks (here: hier mode).
  cfg.hierarchical = BAGUA_HIERARCHICAL_AUTO;
  MP_OK(bagua_quantized_allreduce(x.data(), out.data(), count, BAGUA_FLOAT32, BAGUA_SUM, &cfg, nullptr, comm, nullptr));
  MP_CHECK(out == blocking);
}

void expect_invalid(bagua_status_t s, const char* what) {
  if (s != BAGUA_ERR_INVALID_ARGUMENT && s != BAGUA_ERR_INVALID_USAGE) {
    std::fprintf(stderr, "rank %d: %s returned %s\n", g_rank, what, bagua_status_string(s));
    std::exit(1);
  }
  MP_CHECK(std::strlen(bagua_get_last_error(nullptr)) > 0);
}

void check_bad_input(bagua_comm_t comm) {
  std::vector<float> x(1000, 1.0f), out(1000, 5.0f);
  bagua_compression_t good = minmax_cfg(8, 1024), cfg;
  auto call = [&](const bagua_compression_t* c, bagua_datatype_t dt, bagua_redop_t op, bagua_qstate_t st) {
    return bagua_quantized_allreduce(x.data(), out.data(), 1000, dt, op, c, st, comm, nullptr);
  };
  expect_invalid(call(nullptr, BAGUA_FLOAT32, BAGUA_SUM, nullptr), "NULL cfg");
  cfg = good;
  cfg.magic = 1;
  expect_invalid(call(&cfg, BAGUA_FLOAT32, BAGUA_SUM, nullptr), "bad magic");
  cfg = good;
  cfg.bits = 3;
  expect_invalid(call(&cfg, BAGUA_FLOAT32, BAGUA_SUM, nullptr), "3 bits");
  cfg = good;
  cfg.chunk = 100;
  expect_invalid(call(&cfg, BAGUA_FLOAT32, BAGUA_SUM, nullptr), "chunk 100");
  cfg = good;
  cfg.kind = 99;
  expect_invalid(call(&cfg, BAGUA_FLOAT32, BAGUA_SUM, nullptr), "kind 99");
  cfg = good;
  cfg.hierarchical = 7;
  expect_invalid(call(&cfg, BAGUA_FLOAT32, BAGUA_SUM, nullptr), "hierarchical 7");
  cfg = good;
  cfg.error_feedback = 1;
  expect_invalid(call(&cfg, BAGUA_FLOAT32, BAGUA_SUM, nullptr), "error feedback without a state");
  expect_invalid(call(&good, BAGUA_INT32, BAGUA_SUM, nullptr), "INT32");
  expect_invalid(call(&good, BAGUA_FLOAT32, BAGUA_MAX, nullptr), "MAX");
  expect_invalid(
      bagua_quantized_allreduce(x.data(), x.data() + 1, 999, BAGUA_FLOAT32, BAGUA_SUM, &good, nullptr, comm, nullptr),
      "overlapping buffers");
  expect_invalid(bagua_quantized_allreduce(x.data(), out.data(), SIZE_MAX / 2, BAGUA_FLOAT32, BAGUA_SUM, &good, nullptr,
                                           comm, nullptr),
                 "overflowing count");
  bagua_qstate_t state;
  cfg = good;
  cfg.error_feedback = 1;
  MP_OK(bagua_qstate_create(comm, 500, BAGUA_FLOAT32, &cfg, &state));
  expect_invalid(call(&cfg, BAGUA_FLOAT32, BAGUA_SUM, state), "state for another count");
  cfg.bits = 4;
  expect_invalid(
      bagua_quantized_allreduce(x.data(), out.data(), 500, BAGUA_FLOAT32, BAGUA_SUM, &cfg, state, comm, nullptr),
      "state for another cfg");
  MP_OK(bagua_qstate_destroy(state));
  expect_invalid(bagua_qstate_create(comm, 10, BAGUA_FLOAT32, &good, nullptr), "NULL state pointer");
  expect_invalid(bagua_qstate_destroy(nullptr), "destroy NULL");
  // No side effect, and the communicator still works.
  MP_CHECK(std::all_of(out.begin(), out.end(), [](float v) { return v == 5.0f; }));
  MP_OK(call(&good, BAGUA_FLOAT32, BAGUA_SUM, nullptr));
  if (g_rank == 0) std::printf("bad input: refused with a message, communicator still usable\n");
}

// latency mode (the default BAGUA_QUANTIZED_MIN_BYTES: 1 MiB within a host). Below it every kind, with and without
// error feedback, in every float datatype, gives bit for bit what bagua_allreduce gives on the same input (the
// residual is zero on a first call), sends the bytes bagua_allreduce sends, compresses nothing, and counts as a
// quantized allreduce sent at full precision; at 1 MiB it quantizes again.
void check_latency_path(bagua_comm_t comm) {
  auto stats = [&] {
    bagua_stats_t s;
    s.size = sizeof s;
    MP_OK(bagua_comm_get_stats(comm, &s));
    return s;
  };
  uint64_t calls = 0;
  for (bagua_datatype_t dtype : {BAGUA_FLOAT32, BAGUA_FLOAT16, BAGUA_BFLOAT16})
    for (size_t count : {size_t(1), size_t(1000), size_t(60000)})
      for (int kind : {BAGUA_COMPRESS_MINMAX, BAGUA_COMPRESS_SIGN})
        for (int ef : {0, 1})
          for (bagua_redop_t op : {BAGUA_SUM, BAGUA_AVG}) {
            bagua_compression_t cfg = minmax_cfg(4, 256);
            cfg.kind = kind;
            cfg.error_feedback = ef;
            const size_t elem = dtype == BAGUA_FLOAT32 ? 4 : 2;
            std::vector<uint8_t> in(count * elem), out(count * elem), expect(count * elem);
            std::vector<float> x = input_of(g_rank, count, count + kind);
            // Quarters, and no -0 (x + 0, the residual, would make it +0): exact sums, equal bytes.
            for (size_t i = 0; i < count; ++i) store_value(in.data(), i, dtype, std::round(x[i] * 4) / 4 + 0.0);
            bagua_qstate_t state = nullptr;
            if (ef) MP_OK(bagua_qstate_create(comm, count, dtype, &cfg, &state));
            bagua_stats_t before = stats();
            MP_OK(bagua_quantized_allreduce(in.data(), out.data(), count, dtype, op, &cfg, state, comm, nullptr));
            bagua_stats_t middle = stats();
            MP_OK(bagua_allreduce(in.data(), expect.data(), count, dtype, op, comm, nullptr));
            bagua_stats_t after = stats();
            MP_CHECK(out == expect);
            MP_CHECK(middle.quantized_full_precision == before.quantized_full_precision + 1);
            MP_CHECK(middle.ops[BAGUA_OPKIND_QUANTIZED_ALLREDUCE] == before.ops[BAGUA_OPKIND_QUANTIZED_ALLREDUCE] + 1);
            MP_CHECK(middle.bytes_sent - before.bytes_sent == after.bytes_sent - middle.bytes_sent);
            MP_CHECK(middle.compute_ns == before.compute_ns);
            if (state) {
              std::vector<float> residual(count);
              MP_OK(bagua_qstate_residual(state, residual.data(), count));
              // fp32 sends input + residual exactly; fp16/bf16 keep the rounding of that sum (zero here: the
              // inputs are quarters, exact in every float type)
              MP_CHECK(std::all_of(residual.begin(), residual.end(), [](float v) { return v == 0.0f; }));
              MP_OK(bagua_qstate_destroy(state));
            }
            ++calls;
          }
  // At the size, quantization again.
  const size_t count = (1 << 20) / 4;
  std::vector<float> x = input_of(g_rank, count, 3), out(count);
  bagua_compression_t cfg = minmax_cfg(8, 1024);
  bagua_stats_t before = stats();
  MP_OK(bagua_quantized_allreduce(x.data(), out.data(), count, BAGUA_FLOAT32, BAGUA_SUM, &cfg, nullptr, comm, nullptr));
  bagua_stats_t after = stats();
  MP_CHECK(after.quantized_full_precision == before.quantized_full_precision);
  MP_CHECK(g_size == 1 || after.compute_ns > before.compute_ns);
  if (g_rank == 0)
    std::printf("latency: %llu calls below 1 MiB equal bagua_allreduce bit for bit; 1 MiB quantizes\n",
                static_cast<unsigned long long>(calls));
}

}  // namespace

int main(int argc, char** argv) {
  std::string mode = argc > 1 ? argv[1] : "flat";
  // Every mode but latency tests quantization itself, at sizes below the full-precision size.
  if (mode != "latency") setenv("BAGUA_QUANTIZED_MIN_BYTES", "0", 0);
  g_hier = mode == "hier" || mode == "netns";
  if (mode == "hier") mp_pair_ranks_on_logical_hosts("qhost");
  bagua_comm_t comm;
  MP_OK(bagua_comm_init_from_env(&comm));
  MP_OK(bagua_comm_rank(comm, &g_rank));
  MP_OK(bagua_comm_size(comm, &g_size));
  if (mode == "latency") {
    check_latency_path(comm);
    MP_OK(bagua_comm_destroy(comm));
    return 0;
  }
  check_bad_input(comm);
  check_minmax_bounds(comm);
  check_other_kinds(comm);
  check_error_feedback(comm);
  check_nonblocking(comm);
  if (!g_hier && g_size == 4) check_convergence(comm);
  bagua_stats_t stats;
  stats.size = sizeof(stats);
  MP_OK(bagua_comm_get_stats(comm, &stats));
  MP_CHECK(stats.ops[BAGUA_OPKIND_QUANTIZED_ALLREDUCE] > 0);
  // Hierarchical: every rank in the rail form (hosts of 2 ranks), the leaders (even ranks) with a lone last rank.
  bool compresses = g_hier ? g_size > 2 && (g_size % 2 == 0 || g_rank % 2 == 0) : g_size > 1;
  MP_CHECK(!compresses || stats.compute_ns > 0);
  MP_OK(bagua_comm_destroy(comm));
  if (g_rank == 0) std::printf("mp_quantized %s on %d ranks: ok\n", mode.c_str(), g_size);
  return 0;
}

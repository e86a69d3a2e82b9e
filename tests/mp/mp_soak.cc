// The rank side of scripts/soak.sh (docs/testbed.md, "Fault soak"): random collectives and relaxations of random
// sizes, every result checked against an exact oracle, until --seconds pass; after an error the rank shrinks the
// communicator and goes on with the survivors. Every rank draws the same operation i from (seed, i); after a shrink
// the survivors continue from the highest i any of them reached.
//
// Oracle: rank r (its rank at init) puts v(r, k, i) = (131 r + 7 k + 13 i) mod 251 in element k of operation i.
// Sums, maxima, gathers and exchanges of those integers are exact in int32 and float32. The relaxations: quantized
// allreduce with fp16 on the wire is exact too (sums stay below 2048, exact in fp16, up to 8 ranks); 8-bit min-max
// with chunks of 1024 is within n of the exact sum per element (each rank's codes lose at most half a step of
// range/255 <= 1, the owner's re-quantization of a range <= 250 n at most n/2).
//
// Output lines (the soak script parses them; times are CLOCK_REALTIME seconds):
//   error TIME RANK STATUS OP message   a call failed; the rank then shrinks (RANK: its rank at init)
//   shrunk TIME RANK SIZE               a shrink succeeded
//   left TIME RANK STATUS message       a shrink failed (minority side, or left out): the rank stops
//   WRONG TIME RANK OP message          a result broke the oracle
//   summary rank=R ops=N errors=E wrong=W shrinks=S size=K init_ms=X rss_kib=Y left=L
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "bagua/bagua.h"

namespace {

double realtime() { return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count(); }

int32_t value(int rank, size_t k, uint64_t i) {
  return static_cast<int32_t>((131ull * rank + 7ull * k + 13ull * i) % 251ull);
}

long rss_peak_kib() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line))
    if (line.rfind("VmHWM:", 0) == 0) return std::atol(line.c_str() + 6);
  return -1;
}

enum Kind {
  kAllreduceSum,
  kAllreduceMax,
  kBroadcast,
  kAllgather,
  kReduceScatter,
  kAlltoall,
  kBarrier,
  kQuantizedFp16,
  kQuantizedMinmax8,
  kKinds
};
const char* kKindNames[kKinds] = {"allreduce_sum", "allreduce_max",  "broadcast",
                                  "allgather",     "reduce_scatter", "alltoall",
                                  "barrier",       "quantized_fp16", "quantized_minmax8"};

struct Soak {
  bagua_comm_t comm = nullptr;
  int me = 0;                // rank at init: the oracle's identity
  std::vector<int> members;  // init ranks of the current communicator, by current rank
  long ops = 0, errors = 0, wrong = 0, shrinks = 0;

  int n() const { return static_cast<int>(members.size()); }
  int rank() const { return static_cast<int>(std::find(members.begin(), members.end(), me) - members.begin()); }

  void report_wrong(uint64_t i, Kind kind, size_t k, double got, double want) {
    ++wrong;
    std::printf("WRONG %.3f %d %llu %s element %zu: got %.9g, want %.9g\n", realtime(), me, (unsigned long long)i,
                kKindNames[kind], k, got, want);
  }

  // Runs operation i; returns its status (results checked when it succeeded).
  bagua_status_t run(uint64_t i, uint64_t seed) {
    std::mt19937_64 rng(seed * 1000003ull + i);
    auto kind = static_cast<Kind>(std::uniform_int_distribution<int>(0, kKinds - 1)(rng));
    static const size_t kCounts[] = {1, 3, 100, 1024, 4099, 65536, 262147};
    size_t count = kCounts[std::uniform_int_distribution<int>(0, 6)(rng)];
    const int size = n(), r = rank();
    const size_t per = std::max<size_t>(1, count / size);  // per-rank count of gathers and exchanges
    bagua_status_t st = BAGUA_SUCCESS;
    switch (kind) {
      case kAllreduceSum:
      case kAllreduceMax: {
        std::vector<int32_t> in(count), out(count);
        for (size_t k = 0; k < count; ++k) in[k] = value(me, k, i);
        std::vector<float> fin(in.begin(), in.end()), fout(count);
        st = kind == kAllreduceSum
                 ? bagua_allreduce(in.data(), out.data(), count, BAGUA_INT32, BAGUA_SUM, comm, nullptr)
                 : bagua_allreduce(fin.data(), fout.data(), count, BAGUA_FLOAT32, BAGUA_MAX, comm, nullptr);
        if (st != BAGUA_SUCCESS) return st;
        for (size_t k = 0; k < count; ++k) {
          int32_t want = kind == kAllreduceSum ? 0 : -1;
          for (int m : members) want = kind == kAllreduceSum ? want + value(m, k, i) : std::max(want, value(m, k, i));
          double got = kind == kAllreduceSum ? out[k] : fout[k];
          if (got != want) return report_wrong(i, kind, k, got, want), BAGUA_SUCCESS;
        }
        return st;
      }
      case kBroadcast: {
        int root = static_cast<int>(rng() % size);
        std::vector<int32_t> buf(count);
        for (size_t k = 0; k < count; ++k) buf[k] = r == root ? value(me, k, i) : -1;
        st = bagua_broadcast(buf.data(), buf.data(), count, BAGUA_INT32, root, comm, nullptr);
        if (st != BAGUA_SUCCESS) return st;
        for (size_t k = 0; k < count; ++k)
          if (buf[k] != value(members[root], k, i))
            return report_wrong(i, kind, k, buf[k], value(members[root], k, i)), st;
        return st;
      }
      case kAllgather: {
        std::vector<int32_t> in(per), out(per * size);
        for (size_t k = 0; k < per; ++k) in[k] = value(me, k, i);
        st = bagua_allgather(in.data(), out.data(), per, BAGUA_INT32, comm, nullptr);
        if (st != BAGUA_SUCCESS) return st;
        for (int b = 0; b < size; ++b)
          for (size_t k = 0; k < per; ++k)
            if (out[b * per + k] != value(members[b], k, i))
              return report_wrong(i, kind, b * per + k, out[b * per + k], value(members[b], k, i)), st;
        return st;
      }
      case kReduceScatter: {
        std::vector<int32_t> in(per * size), out(per);
        for (size_t k = 0; k < per * size; ++k) in[k] = value(me, k, i);
        st = bagua_reduce_scatter(in.data(), out.data(), per, BAGUA_INT32, BAGUA_SUM, comm, nullptr);
        if (st != BAGUA_SUCCESS) return st;
        for (size_t k = 0; k < per; ++k) {
          int32_t want = 0;
          for (int m : members) want += value(m, r * per + k, i);
          if (out[k] != want) return report_wrong(i, kind, k, out[k], want), st;
        }
        return st;
      }
      case kAlltoall: {
        std::vector<int32_t> in(per * size), out(per * size);
        for (size_t k = 0; k < per * size; ++k) in[k] = value(me, k, i);
        st = bagua_alltoall(in.data(), out.data(), per, BAGUA_INT32, comm, nullptr);
        if (st != BAGUA_SUCCESS) return st;
        for (int p = 0; p < size; ++p)
          for (size_t k = 0; k < per; ++k)
            if (out[p * per + k] != value(members[p], r * per + k, i))
              return report_wrong(i, kind, p * per + k, out[p * per + k], value(members[p], r * per + k, i)), st;
        return st;
      }
      case kBarrier: return bagua_barrier(comm, nullptr);
      case kQuantizedFp16:
      case kQuantizedMinmax8: {
        const bool fp16 = kind == kQuantizedFp16;
        if (fp16 && size > 8) return bagua_barrier(comm, nullptr);  // sums past 2048 are not exact in fp16
        bagua_compression_t cfg = BAGUA_COMPRESSION_INITIALIZER;
        cfg.kind = fp16 ? BAGUA_COMPRESS_FP16 : BAGUA_COMPRESS_MINMAX;
        cfg.bits = 8;
        cfg.chunk = 1024;
        std::vector<float> buf(count);
        for (size_t k = 0; k < count; ++k) buf[k] = static_cast<float>(value(me, k, i));
        st = bagua_quantized_allreduce(buf.data(), buf.data(), count, BAGUA_FLOAT32, BAGUA_SUM, &cfg, nullptr, comm,
                                       nullptr);
        if (st != BAGUA_SUCCESS) return st;
        const double bound = fp16 ? 0.0 : size + 1e-3;
        for (size_t k = 0; k < count; ++k) {
          double want = 0;
          for (int m : members) want += value(m, k, i);
          if (std::fabs(buf[k] - want) > bound) return report_wrong(i, kind, k, buf[k], want), st;
        }
        return st;
      }
      case kKinds: break;
    }
    return st;
  }

  // After an error: shrink (again while the new communicator fails at once), learn the members, agree where to go
  // on. Returns false when this rank is out.
  bool recover(uint64_t* next) {
    for (int attempt = 0; attempt < 3; ++attempt) {
      bagua_comm_t survivors = nullptr;
      bagua_status_t st = bagua_comm_shrink(comm, &survivors);
      if (st != BAGUA_SUCCESS) {
        // A member died after the decision: the library says to shrink again.
        if (std::strstr(bagua_get_last_error(comm), "call bagua_comm_shrink again")) continue;
        std::printf("left %.3f %d %d %s\n", realtime(), me, static_cast<int>(st), bagua_get_last_error(comm));
        return false;
      }
      int size = 0;
      bagua_comm_size(survivors, &size);
      std::vector<int32_t> ids(static_cast<size_t>(size));
      int32_t mine = me;
      unsigned long long reached = *next;
      st = bagua_allgather(&mine, ids.data(), 1, BAGUA_INT32, survivors, nullptr);
      if (st == BAGUA_SUCCESS) st = bagua_allreduce(&reached, &reached, 1, BAGUA_UINT64, BAGUA_MAX, survivors, nullptr);
      if (st != BAGUA_SUCCESS) {  // the new communicator already failed: shrink the old one again
        bagua_comm_destroy(survivors);
        continue;
      }
      bagua_comm_destroy(comm);
      comm = survivors;
      members.assign(ids.begin(), ids.end());
      *next = reached + 1;
      ++shrinks;
      std::printf("shrunk %.3f %d %d\n", realtime(), me, size);
      std::fflush(stdout);
      return true;
    }
    std::printf("left %.3f %d %d %s\n", realtime(), me, static_cast<int>(BAGUA_ERR_REMOTE), "three shrinks failed");
    return false;
  }
};

}  // namespace

int main(int argc, char** argv) {
  double seconds = 60;
  uint64_t seed = 1;
  for (int a = 1; a + 1 < argc; a += 2) {
    if (std::strcmp(argv[a], "--seconds") == 0) seconds = std::atof(argv[a + 1]);
    if (std::strcmp(argv[a], "--seed") == 0) seed = std::strtoull(argv[a + 1], nullptr, 10);
  }
  Soak soak;
  auto t0 = std::chrono::steady_clock::now();
  if (bagua_comm_init_from_env(&soak.comm) != BAGUA_SUCCESS) {
    std::fprintf(stderr, "mp_soak: init failed: %s\n", bagua_get_last_error(nullptr));
    return 1;
  }
  double init_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  int size = 0;
  bagua_comm_rank(soak.comm, &soak.me);
  bagua_comm_size(soak.comm, &size);
  for (int r = 0; r < size; ++r) soak.members.push_back(r);
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  bool left = false;
  auto start = std::chrono::steady_clock::now();
  uint64_t i = 0;
  // Logs a failed call and shrinks; false when this rank is out.
  auto recovered = [&](bagua_status_t st) {
    ++soak.errors;
    std::printf("error %.3f %d %d %llu %s\n", realtime(), soak.me, static_cast<int>(st), (unsigned long long)i,
                bagua_get_last_error(soak.comm));
    left = !soak.recover(&i);
    return !left;
  };
  for (;;) {
    // Every 16 operations the ranks agree whether time is up (a collective like the others).
    if (i % 16 == 0) {
      int32_t over = std::chrono::steady_clock::now() - start > std::chrono::duration<double>(seconds) ? 1 : 0;
      bagua_status_t st = bagua_allreduce(&over, &over, 1, BAGUA_INT32, BAGUA_MAX, soak.comm, nullptr);
      if (st == BAGUA_SUCCESS && over) break;
      if (st != BAGUA_SUCCESS) {
        if (!recovered(st)) break;
        continue;
      }
    }
    bagua_status_t st = soak.run(i, seed);
    if (st == BAGUA_SUCCESS) {
      ++soak.ops;
      ++i;
    } else if (!recovered(st)) {
      break;
    }
  }
  bagua_comm_destroy(soak.comm);
  std::printf("summary rank=%d ops=%ld errors=%ld wrong=%ld shrinks=%ld size=%d init_ms=%.0f rss_kib=%ld left=%d\n",
              soak.me, soak.ops, soak.errors, soak.wrong, soak.shrinks, soak.n(), init_ms, rss_peak_kib(),
              left ? 1 : 0);
  return soak.wrong == 0 ? 0 : 1;
}

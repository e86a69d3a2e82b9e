// Mismatched calls (run under bagua-run -n 2 or 3 with BAGUA_TIMEOUT=5). Each case runs on a communicator split
// from the job's, where the ranks make calls that differ. What must hold, on every rank:
//   - no rank returns SUCCESS with a result that differs from its peers';
//   - every rank gets INVALID_USAGE (relayed by its neighbours when it saw no mismatched message itself) within 2 s,
//   far below the 5 s timeout: the call fingerprint in each message tag names the mismatch;
//   - the message names both calls where this rank received the other's message;
//   - the job's communicator still works afterwards.
// Oracle: the error status and its time; the message's text for the naming.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "mp/mp_check.h"

namespace {

int g_rank = 0, g_size = 0;

struct Outcome {
  bagua_status_t status = BAGUA_SUCCESS;
  std::string error;
};

// A rank that never received a mismatched message learns of it from its neighbours, with the same status.
bool is_mismatch(const Outcome& o) { return o.status == BAGUA_ERR_INVALID_USAGE; }

// Runs the case's calls (each returns a status; the first failure ends it), then checks the outcome.
template <typename Calls>
void run_case(bagua_comm_t world, const char* name, Calls calls, const char* named = nullptr) {
  auto start = std::chrono::steady_clock::now();
  Outcome o;
  bagua_comm_t comm = nullptr;
  // The split's last steps are not a barrier: ranks that are through it may run the case and report the
  // mismatch to a rank still forming the communicator, whose split then returns the error.
  o.status = bagua_comm_split(world, 0, g_rank, &comm);
  if (o.status == BAGUA_SUCCESS) {
    o.status = calls(comm);
    // A call may succeed locally (a root's eager sends); the next collective must then report it.
    if (o.status == BAGUA_SUCCESS) {
      float probe = 1.0f;
      o.status = bagua_allreduce(&probe, &probe, 1, BAGUA_FLOAT32, BAGUA_SUM, comm, nullptr);
    }
  }
  if (o.status != BAGUA_SUCCESS) o.error = bagua_get_last_error(comm ? comm : world);
  double seconds = mp_seconds_since(start);
  std::printf("rank %d %s: %s after %.3f s: %s\n", g_rank, name, bagua_status_string(o.status), seconds,
              o.error.c_str());
  std::fflush(stdout);
  if (!is_mismatch(o) || seconds > 2.0) {
    std::fprintf(stderr, "rank %d case %s: expected INVALID_USAGE within 2 s, got %s after %.3f s: %s\n", g_rank, name,
                 bagua_status_string(o.status), seconds, o.error.c_str());
    std::exit(1);
  }
  if (named && o.error.find(named) == std::string::npos) {
    std::fprintf(stderr, "rank %d case %s: the message does not name the mismatch (%s): %s\n", g_rank, name, named,
                 o.error.c_str());
    std::exit(1);
  }
  if (comm) MP_OK(bagua_comm_destroy(comm));
  // The job's communicator is untouched.
  int one = 1;
  MP_OK(bagua_allreduce(&one, &one, 1, BAGUA_INT32, BAGUA_SUM, world, nullptr));
  MP_CHECK(one == g_size);
}

}  // namespace

int main() {
  bagua_comm_t world;
  MP_OK(bagua_comm_init_from_env(&world));
  MP_OK(bagua_comm_rank(world, &g_rank));
  MP_OK(bagua_comm_size(world, &g_size));
  const bool first = g_rank == 0, last = g_rank == g_size - 1;

  // The case the issue found: SUM on one rank, MAX on the others, 1000 floats (and large). In place, the buffer
  // must still hold this rank's input: nothing was reduced into it.
  for (size_t count : {size_t{1000}, size_t{1} << 20}) {
    std::vector<float> x(count);
    run_case(
        world, count == 1000 ? "sum-max-1000" : "sum-max-1M",
        [&](bagua_comm_t c) {
          for (size_t i = 0; i < count; ++i) x[i] = static_cast<float>(g_rank + 1);
          bagua_status_t s =
              bagua_allreduce(x.data(), x.data(), count, BAGUA_FLOAT32, first ? BAGUA_SUM : BAGUA_MAX, c, nullptr);
          if (s != BAGUA_SUCCESS && count == 1000)
            for (size_t i = 0; i < count; ++i) MP_CHECK(x[i] == static_cast<float>(g_rank + 1));
          return s;
        },
        "reduction op");
  }
  // Same size in bytes, another datatype.
  for (size_t count : {size_t{1000}, size_t{1} << 20}) {
    std::vector<int32_t> x(count, 1);
    run_case(
        world, count == 1000 ? "float-int-1000" : "float-int-1M",
        [&](bagua_comm_t c) {
          return bagua_allreduce(x.data(), x.data(), count, last ? BAGUA_INT32 : BAGUA_FLOAT32, BAGUA_SUM, c, nullptr);
        },
        "datatype");
  }
  // A count one apart (same message sizes for some algorithms' pieces).
  {
    std::vector<float> x(1001, 1.0f);
    run_case(world, "count", [&](bagua_comm_t c) {
      return bagua_allreduce(x.data(), x.data(), last ? 1001 : 1000, BAGUA_FLOAT32, BAGUA_SUM, c, nullptr);
    });
  }
  // allreduce against broadcast (whose root, the last rank, sends to the others).
  {
    std::vector<float> x(1000, 1.0f);
    run_case(world, "allreduce-broadcast", [&](bagua_comm_t c) {
      if (last) return bagua_broadcast(x.data(), x.data(), x.size(), BAGUA_FLOAT32, g_rank, c, nullptr);
      return bagua_allreduce(x.data(), x.data(), x.size(), BAGUA_FLOAT32, BAGUA_SUM, c, nullptr);
    });
  }
  // Broadcasts with different roots: each rank names itself root.
  {
    std::vector<float> x(1000, 1.0f);
    run_case(world, "broadcast-roots", [&](bagua_comm_t c) {
      return bagua_broadcast(x.data(), x.data(), x.size(), BAGUA_FLOAT32, g_rank, c, nullptr);
    });
  }
  // One rank skips a collective: the others call allreduce then allgather; the last calls only the allgather.
  {
    std::vector<float> x(1000, 1.0f), all(1000 * g_size);
    run_case(world, "skipped", [&](bagua_comm_t c) {
      if (!last) {
        bagua_status_t s = bagua_allreduce(x.data(), x.data(), x.size(), BAGUA_FLOAT32, BAGUA_SUM, c, nullptr);
        if (s != BAGUA_SUCCESS) return s;
      }
      return bagua_allgather(x.data(), all.data(), x.size(), BAGUA_FLOAT32, c, nullptr);
    });
  }
  // Quantized allreduce with another chunk, or another hierarchical mode, on the last rank: both change the
  // messages and the number of rounds (the one-round form depends on compressed sizes). The fingerprint names it
  // on the first message, before any message size could differ.
  for (const char* what : {"chunk", "hierarchical"}) {
    std::vector<float> x(680000, 1.0f);
    run_case(
        world, what == std::string("chunk") ? "quantized-chunk" : "quantized-hierarchical",
        [&](bagua_comm_t c) {
          bagua_compression_t cfg = BAGUA_COMPRESSION_INITIALIZER;
          cfg.kind = BAGUA_COMPRESS_MINMAX;
          cfg.bits = 8;
          cfg.chunk = what == std::string("chunk") && last ? 4096 : 256;
          cfg.hierarchical =
              what == std::string("hierarchical") && last ? BAGUA_HIERARCHICAL_ON : BAGUA_HIERARCHICAL_OFF;
          return bagua_quantized_allreduce(x.data(), x.data(), x.size(), BAGUA_FLOAT32, BAGUA_SUM, &cfg, nullptr, c,
                                           nullptr);
        },
        "algorithm or settings");
  }
  // A send of float32 received as int32.
  if (g_size == 2) {
    std::vector<float> x(256, 1.0f);
    run_case(
        world, "send-recv",
        [&](bagua_comm_t c) {
          if (first) return bagua_send(x.data(), x.size(), BAGUA_FLOAT32, 1, c, nullptr);
          return bagua_recv(x.data(), x.size(), BAGUA_INT32, 0, c, nullptr);
        },
        "datatype");
    // Counts that differ where the receiver takes either the data or a single-copy header (16-64 KiB).
    std::vector<float> y(6000, 1.0f);
    run_case(world, "send-recv-count", [&](bagua_comm_t c) {
      if (first) return bagua_send(y.data(), 5000, BAGUA_FLOAT32, 1, c, nullptr);
      return bagua_recv(y.data(), y.size(), BAGUA_FLOAT32, 0, c, nullptr);
    });
    // A single-copy send (20 KB) against a plain receive below the threshold (12 KB): the header is acknowledged.
    run_case(world, "send-recv-count-below", [&](bagua_comm_t c) {
      if (first) return bagua_send(y.data(), 5000, BAGUA_FLOAT32, 1, c, nullptr);
      return bagua_recv(y.data(), 3000, BAGUA_FLOAT32, 0, c, nullptr);
    });
  }
  MP_OK(bagua_comm_destroy(world));
  return 0;
}

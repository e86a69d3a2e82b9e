// Under bagua-run -n N: allreduce of every datatype x op x (in place, out of place) x count
// {0, 1, 7, 1000003}, checked bit-exactly against a serial reference (common/exact_data.h), then
// random floats whose results must be bitwise identical on every rank, several requests in flight, and
// the stats counters of the ring and the direct algorithm.
#include <sys/uio.h>
#include <unistd.h>

#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "common/exact_data.h"
#include "mp/mp_check.h"

using namespace bagua;
using namespace bagua::testing;

namespace {
int g_rank, g_size;
bool g_cross_memory = false;  // every rank can read and write every other's memory (the direct allreduce runs)

// Collective: each rank reads and writes back a word of every other rank with process_vm_readv/writev
// (bagua-run starts all ranks on this host), as the library's own probe does; false if any rank fails or
// BAGUA_CMA=0.
bool probe_cross_memory(bagua_comm_t comm) {
  static uint64_t word = 0x5eed;
  uint64_t mine[2] = {static_cast<uint64_t>(getpid()), reinterpret_cast<uintptr_t>(&word)};
  std::vector<uint64_t> all(2 * g_size);
  MP_OK(bagua_allgather(mine, all.data(), 2, BAGUA_UINT64, comm, nullptr));
  const char* cma = std::getenv("BAGUA_CMA");
  int ok = cma == nullptr || std::string(cma) != "0";
  for (int r = 0; r < g_size && ok; ++r) {
    if (r == g_rank) continue;
    uint64_t value = 0;
    iovec local{&value, sizeof(value)}, remote{reinterpret_cast<void*>(all[2 * r + 1]), sizeof(value)};
    ok = process_vm_readv(static_cast<pid_t>(all[2 * r]), &local, 1, &remote, 1, 0) == sizeof(value) &&
         value == 0x5eed &&
         process_vm_writev(static_cast<pid_t>(all[2 * r]), &local, 1, &remote, 1, 0) == sizeof(value);
  }
  MP_OK(bagua_allreduce(&ok, &ok, 1, BAGUA_INT32, BAGUA_MIN, comm, nullptr));
  return ok == 1;
}
bool cross_memory_works() { return g_cross_memory; }

void check_exact(bagua_comm_t comm) {
  const size_t counts[] = {0, 1, 7, 1000003};
  int checked = 0;
  for (int t = 0; t < kNumDatatypes; ++t) {
    auto dtype = static_cast<bagua_datatype_t>(t);
    size_t size = datatype_size(dtype);
    for (int o = 0; o < kNumRedops; ++o) {
      auto op = static_cast<bagua_redop_t>(o);
      for (size_t count : counts) {
        for (int in_place = 0; in_place < 2; ++in_place) {
          std::vector<unsigned char> send(count * size + 1), recv(count * size + 1, 0xAB);
          fill_input(send.data(), count, dtype, op, g_rank);
          std::vector<unsigned char> original = send;
          void* sendbuf = send.data();
          void* recvbuf = in_place ? send.data() : recv.data();
          MP_OK(bagua_allreduce(sendbuf, recvbuf, count, dtype, op, comm, nullptr));
          size_t bad = first_mismatch(recvbuf, count, dtype, op, g_size);
          if (bad != count) {
            std::fprintf(stderr, "rank %d: allreduce %s %s count %zu %s: element %zu wrong\n", g_rank,
                         datatype_name(dtype), redop_name(op), count, in_place ? "in place" : "out of place", bad);
            std::exit(1);
          }
          if (!in_place) {
            // The send buffer is untouched, and nothing is written past the end of recvbuf.
            MP_CHECK(send == original);
            MP_CHECK(recv[count * size] == 0xAB);
          }
          ++checked;
        }
      }
    }
  }
  if (g_rank == 0) std::printf("exact allreduce: %d cases on %d ranks ok\n", checked, g_size);
}

// Random (inexact) float sums must still come out bitwise identical everywhere.
void check_identical(bagua_comm_t comm) {
  for (auto dtype : {BAGUA_FLOAT32, BAGUA_FLOAT16, BAGUA_BFLOAT16, BAGUA_FLOAT64}) {
    const size_t count = 300007;
    std::mt19937 rng(1234 + g_rank);
    std::uniform_real_distribution<double> dist(-1.0, 1.0);
    std::vector<unsigned char> buf(count * datatype_size(dtype));
    for (size_t i = 0; i < count; ++i) store_value(buf.data(), i, dtype, dist(rng));
    MP_OK(bagua_allreduce(buf.data(), buf.data(), count, dtype, BAGUA_SUM, comm, nullptr));
    uint64_t hash = fnv1a(buf.data(), buf.size());
    uint64_t lo = hash, hi = hash;
    MP_OK(bagua_allreduce(&lo, &lo, 1, BAGUA_UINT64, BAGUA_MIN, comm, nullptr));
    MP_OK(bagua_allreduce(&hi, &hi, 1, BAGUA_UINT64, BAGUA_MAX, comm, nullptr));
    MP_CHECK(lo == hash && hi == hash);
  }
}

// Several non-blocking allreduces in flight at once, finished in reverse order, mixed with bagua_test.
void check_in_flight(bagua_comm_t comm) {
  const int kRequests = 8;
  std::vector<std::vector<int32_t>> bufs(kRequests);
  std::vector<bagua_request_t> reqs(kRequests);
  for (int k = 0; k < kRequests; ++k) {
    size_t count = 1000 + 77777 * k;
    bufs[k].resize(count);
    fill_input(bufs[k].data(), count, BAGUA_INT32, BAGUA_SUM, g_rank);
    MP_OK(bagua_iallreduce(bufs[k].data(), bufs[k].data(), count, BAGUA_INT32, BAGUA_SUM, comm, &reqs[k]));
  }
  int done = 0;
  bagua_status_t s = bagua_test(reqs[kRequests - 1], &done);
  MP_CHECK((s == BAGUA_IN_PROGRESS && done == 0) || (s == BAGUA_SUCCESS && done == 1));
  for (int k = kRequests - 1 - done; k >= 0; --k) MP_OK(bagua_wait(reqs[k]));
  for (int k = 0; k < kRequests; ++k)
    MP_CHECK(first_mismatch(bufs[k].data(), bufs[k].size(), BAGUA_INT32, BAGUA_SUM, g_size) == bufs[k].size());
}

// Statistics of one allreduce with the algorithm forced ("ring" or "direct"), on a communicator of its own.
void check_stats(const char* algorithm) {
  setenv("BAGUA_ALGO", (std::string("allreduce:") + algorithm).c_str(), 1);
  bagua_comm_t comm = nullptr;
  MP_OK(bagua_comm_init_from_env(&comm));
  unsetenv("BAGUA_ALGO");
  const bool direct = std::string(algorithm) == "direct";
  bagua_stats_t before{};
  before.size = sizeof(before);
  MP_OK(bagua_comm_get_stats(comm, &before));
  // A fresh communicator has sent nothing the caller asked for: init's warm-up and calibration stay out.
  MP_CHECK(before.bytes_sent == 0 && before.messages_sent == 0 && before.compute_ns == 0);
  for (int k = 0; k < BAGUA_OPKIND_COUNT; ++k) MP_CHECK(before.ops[k] == 0 && before.bytes_sent_by_op[k] == 0);
  std::vector<float> buf(1 << 16, 1.0f);
  MP_OK(bagua_allreduce(buf.data(), buf.data(), buf.size(), BAGUA_FLOAT32, BAGUA_SUM, comm, nullptr));
  bagua_stats_t after{};
  after.size = sizeof(after);
  MP_OK(bagua_comm_get_stats(comm, &after));
  MP_CHECK(after.ops[BAGUA_OPKIND_ALLREDUCE] == before.ops[BAGUA_OPKIND_ALLREDUCE] + 1);
  for (float v : buf) MP_CHECK(v == static_cast<float>(g_size));
  if (g_size > 1) {
    // A ring allreduce sends 2(n-1)/n of the buffer. The direct one writes its block (n-1)/n of the buffer,
    // within an element) into every peer and sends each a 400-byte address message (with room for device calls'
    // IPC handles) and a 1-byte "done".
    const uint64_t bytes = buf.size() * sizeof(float), peers = static_cast<uint64_t>(g_size - 1);
    uint64_t expected = direct ? peers * bytes / g_size + 401 * peers : 2 * peers * bytes / g_size;
    uint64_t slack = direct ? 4 * peers : 8;
    uint64_t sent = after.bytes_sent_by_op[BAGUA_OPKIND_ALLREDUCE] - before.bytes_sent_by_op[BAGUA_OPKIND_ALLREDUCE];
    MP_CHECK(sent + slack >= expected && sent <= expected + slack);
    // Chunks differ by at most one element, so what a rank receives is within 2(n-1) elements of what it sends.
    long long diff = static_cast<long long>(after.bytes_received - before.bytes_received) -
                     static_cast<long long>(after.bytes_sent - before.bytes_sent);
    MP_CHECK(diff >= -8ll * (g_size - 1) && diff <= 8ll * (g_size - 1));
  }
  bagua_status_t async = BAGUA_ERR_INTERNAL;
  MP_OK(bagua_comm_get_async_error(comm, &async));
  MP_CHECK(async == BAGUA_SUCCESS);
  MP_OK(bagua_comm_destroy(comm));
}
// Ranks that disagree on the count: every rank gets an error and nothing is written past any buffer. With
// the direct algorithm (one host, cross-memory attach) every rank refuses before touching a peer.
void check_disagreement() {
  if (g_size < 2) return;
  setenv("BAGUA_ALGO", "allreduce:direct", 1);
  bagua_comm_t comm = nullptr;
  // Init's last steps are no barrier: ranks through it may find the mismatch and tell a rank still in init.
  bagua_status_t status = bagua_comm_init_from_env(&comm);
  unsetenv("BAGUA_ALGO");
  const size_t count = 100000 + 1000 * static_cast<size_t>(g_rank), guard = 4096;
  std::vector<float> buf(count + guard, 1.0f);
  if (status == BAGUA_SUCCESS)
    status = bagua_allreduce(buf.data(), buf.data(), count, BAGUA_FLOAT32, BAGUA_SUM, comm, nullptr);
  MP_CHECK(status != BAGUA_SUCCESS);
  if (cross_memory_works()) {
    // Refused here, or by a peer first whose notice (naming the same cause) arrived before our own check: by the
    // call fingerprint in the header's tag (core/tags.h), or by the header's own comparison.
    MP_CHECK(status == BAGUA_ERR_INVALID_USAGE);
    std::string error = bagua_get_last_error(comm);
    MP_CHECK(error.find("they differ in the count") != std::string::npos ||
             error.find("called allreduce with") != std::string::npos);
    for (size_t i = 0; i < buf.size(); ++i) MP_CHECK(buf[i] == 1.0f);  // refused before any write
  }
  for (size_t i = count; i < buf.size(); ++i) MP_CHECK(buf[i] == 1.0f);
  if (comm) MP_OK(bagua_comm_destroy(comm));
}
}  // namespace

int main() {
  bagua_comm_t comm = nullptr;
  MP_OK(bagua_comm_init_from_env(&comm));
  MP_OK(bagua_comm_rank(comm, &g_rank));
  MP_OK(bagua_comm_size(comm, &g_size));
  g_cross_memory = probe_cross_memory(comm);
  check_exact(comm);
  check_identical(comm);
  check_in_flight(comm);
  MP_OK(bagua_comm_destroy(comm));
  check_stats("ring");
  if (cross_memory_works()) check_stats("direct");
  check_disagreement();
  return 0;
}

// Under bagua-run -n N, all in one process per N:
//   matrix   every collective x datatype x op x (in place, out of place) x count {0, 1, 7, 2^10-1, 2^10+1,
//            ~4M (2^18+3 on device memory)} with automatic algorithm selection, roots rotating, every third case on
//            misaligned buffers;
//   forced   every algorithm of every collective forced through BAGUA_ALGO (float32, int32 x sum, max x 5 counts);
//   shm      alltoall(v) through shared segments: operations in flight together, groups, call order across
//            memory kinds (with BAGUA_DEVICE_STANDIN=1), a count mismatch;
//   split    bagua_comm_split (colors, keys, NOCOLOR) with the child used alongside its parent;
//   groups   send/recv patterns inside bagua_group_start/end that would deadlock as blocking calls;
//   turn     a call waiting for its turn behind a non-blocking alltoall that no one waits on still times out;
//   handoff  calls on one communicator, each followed at once by a call on another (core/idle_progress.h); a third
//            argument gives the rounds (default 30).
// Results are compared bit for bit with common/collective_oracle.h; guard bytes after every buffer must
// stay untouched. For per-rank-count collectives the ~4M count is the total (4M / N per rank).
// A second argument puts the matrix and forced cases on device memory: `device` (every rank) or `mixed` (odd
// ranks device, even ranks host). Each case then copies its buffers, guards included, to the device on a stream
// (the stand-in sometimes delays that copy), makes the call on that stream, copies back on it and synchronizes.
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include <fmt/format.h>

#include "algorithms/registry.h"
#include "api/api_guard.h"
#include "common/collective_oracle.h"
#include "kernels/device_runtime.h"
#include "mp/mp_check.h"

using namespace bagua;
using namespace bagua::testing;

namespace {

int g_rank, g_size;
long g_cases = 0;

enum class Memory { kHost, kDevice, kMixed };
Memory g_memory = Memory::kHost;
void* g_stream = nullptr;  // the stream of device calls
bool device_here() { return g_memory == Memory::kDevice || (g_memory == Memory::kMixed && g_rank % 2 == 1); }

struct Buf;
std::vector<Buf*> g_live;  // the buffers of the case in progress

// Host storage kept between cases: the matrix makes thousands of buffers of up to 32 MiB, and fresh mappings' page
// faults took a quarter of a 1-rank run (the test's own cost). Not kept under AddressSanitizer (a late access after
// a call returned must hit freed memory) nor with MP_FRESH_BUFFERS=1 (mp_collectives_2: a late cross-memory write
// into a freed buffer then faults instead of landing in the next case's).
std::vector<std::vector<unsigned char>> g_kept_storage;
bool keep_storage() {
#if defined(__SANITIZE_ADDRESS__)
  return false;
#else
  static const bool keep = std::getenv("MP_FRESH_BUFFERS") == nullptr;
  return keep;
#endif
}
std::vector<unsigned char> take_storage(size_t n) {
  std::vector<unsigned char> storage;
  if (!g_kept_storage.empty()) {
    storage = std::move(g_kept_storage.back());
    g_kept_storage.pop_back();
  }
  storage.assign(n, 0xAB);
  return storage;
}

// A buffer with guard bytes after it, optionally starting one byte off alignment. On device memory, `storage` is
// the host image that the case fills and checks, and `device` its copy that the call gets.
struct Buf {
  std::vector<unsigned char> storage;
  unsigned char* ptr = nullptr;
  size_t bytes = 0;
  unsigned char* device = nullptr;
  Buf(size_t n, bool misalign) : storage(take_storage(n + 17)), ptr(storage.data() + (misalign ? 1 : 0)), bytes(n) {
    if (!device_here()) return;
    device = static_cast<unsigned char*>(device_runtime().alloc_device(storage.size(), 0));
    MP_CHECK(device != nullptr);
    g_live.push_back(this);
  }
  ~Buf() {
    if (keep_storage() && g_kept_storage.size() < 4) g_kept_storage.push_back(std::move(storage));
    if (!device) return;
    device_runtime().free_device(device);
    g_live.erase(std::find(g_live.begin(), g_live.end(), this));
  }
  Buf(const Buf&) = delete;
  Buf& operator=(const Buf&) = delete;
  bool guard_ok() const {
    for (size_t i = ptr - storage.data() + bytes; i < storage.size(); ++i)
      if (storage[i] != 0xAB) return false;
    return true;
  }
};

// The address the call gets for a host address inside a buffer of the case.
template <typename T>
T* A(T* host) {
  auto* p = reinterpret_cast<unsigned char*>(const_cast<std::remove_const_t<T>*>(host));
  for (Buf* b : g_live)
    if (p >= b->storage.data() && p <= b->storage.data() + b->storage.size())
      return reinterpret_cast<T*>(b->device + (p - b->storage.data()));
  return host;
}

// The caller's work before a device call (it produces the input) and after it (it consumes the output).
void to_device() {
  if (g_live.empty()) return;
  static long calls = 0;
  if (StandinControl* standin = standin_control(); standin && ++calls % 4 == 0)
    standin->run_on_stream(g_stream, [] { std::this_thread::sleep_for(std::chrono::milliseconds(2)); });
  for (Buf* b : g_live) device_runtime().copy_async(b->device, b->storage.data(), b->storage.size(), g_stream);
}
void from_device() {
  if (g_live.empty()) return;
  for (Buf* b : g_live) device_runtime().copy_async(b->storage.data(), b->device, b->storage.size(), g_stream);
  device_runtime().synchronize(g_stream, 120000);
}

struct Case {
  Collective c;
  bagua_datatype_t t;
  bagua_redop_t op;
  size_t count;
  bool in_place;
  int root;
  bool misalign;
};

std::string describe(const Case& k) {
  return fmt::format("{} {} {} count {} {} root {}{}", collective_name(k.c), datatype_name(k.t), redop_name(k.op),
                     k.count, k.in_place ? "in place" : "out of place", k.root, k.misalign ? " misaligned" : "");
}

#define CASE_CHECK(cond)                                                                                               \
  do {                                                                                                                 \
    if (!(cond)) {                                                                                                     \
      std::fprintf(stderr, "rank %d: %s: check failed: %s (line %d)\n", g_rank, describe(k).c_str(), #cond, __LINE__); \
      std::exit(1);                                                                                                    \
    }                                                                                                                  \
  } while (0)
#define CASE_OK(call)                                                                                     \
  do {                                                                                                    \
    to_device();                                                                                          \
    bagua_status_t s_ = (call);                                                                           \
    from_device();                                                                                        \
    if (s_ != BAGUA_SUCCESS) {                                                                            \
      std::fprintf(stderr, "rank %d: %s: %s: %s\n", g_rank, describe(k).c_str(), bagua_status_string(s_), \
                   bagua_get_last_error(comm));                                                           \
      std::exit(1);                                                                                       \
    }                                                                                                     \
  } while (0)

void run_case(bagua_comm_t comm, const Case& k) {
  const int n = g_size, r = g_rank;
  const size_t es = datatype_size(k.t), cnt = k.count;
  ++g_cases;
  switch (k.c) {
    case Collective::kAllreduce: {
      Buf send(cnt * es, k.misalign), recv(cnt * es, k.misalign);
      fill_input(send.ptr, cnt, k.t, k.op, r);
      unsigned char* out = k.in_place ? send.ptr : recv.ptr;
      CASE_OK(bagua_allreduce(A(send.ptr), A(out), cnt, k.t, k.op, comm, g_stream));
      CASE_CHECK(first_mismatch(out, cnt, k.t, k.op, n) == cnt);
      CASE_CHECK(send.guard_ok() && recv.guard_ok());
      break;
    }
    case Collective::kReduceScatter: {
      Buf send(n * cnt * es, k.misalign), recv(cnt * es, k.misalign);
      fill_input_at(send.ptr, n * cnt, 0, k.t, k.op, r);
      unsigned char* out = k.in_place ? send.ptr + r * cnt * es : recv.ptr;
      CASE_OK(bagua_reduce_scatter(A(send.ptr), A(out), cnt, k.t, k.op, comm, g_stream));
      CASE_CHECK(first_mismatch_at(out, cnt, r * cnt, k.t, k.op, n) == cnt);
      CASE_CHECK(send.guard_ok() && recv.guard_ok());
      break;
    }
    case Collective::kAllgather: {
      Buf send(cnt * es, k.misalign), recv(n * cnt * es, k.misalign);
      unsigned char* in = k.in_place ? recv.ptr + r * cnt * es : send.ptr;
      fill_codes(in, cnt, k.t, r, 0);
      CASE_OK(bagua_allgather(A(in), A(recv.ptr), cnt, k.t, comm, g_stream));
      for (int b = 0; b < n; ++b) CASE_CHECK(first_code_mismatch(recv.ptr + b * cnt * es, cnt, k.t, b, 0) == cnt);
      CASE_CHECK(send.guard_ok() && recv.guard_ok());
      break;
    }
    case Collective::kBroadcast: {
      Buf send(cnt * es, k.misalign), recv(cnt * es, k.misalign);
      if (r == k.root) fill_codes(send.ptr, cnt, k.t, k.root, 1);
      unsigned char* out = k.in_place ? send.ptr : recv.ptr;
      CASE_OK(bagua_broadcast(r == k.root ? A(send.ptr) : nullptr, A(out), cnt, k.t, k.root, comm, g_stream));
      CASE_CHECK(first_code_mismatch(out, cnt, k.t, k.root, 1) == cnt);
      CASE_CHECK(send.guard_ok() && recv.guard_ok());
      break;
    }
    case Collective::kReduce: {
      Buf send(cnt * es, k.misalign), recv(cnt * es, k.misalign);
      fill_input(send.ptr, cnt, k.t, k.op, r);
      unsigned char* out = r != k.root ? nullptr : (k.in_place ? send.ptr : recv.ptr);
      CASE_OK(bagua_reduce(A(send.ptr), A(out), cnt, k.t, k.op, k.root, comm, g_stream));
      if (r == k.root) CASE_CHECK(first_mismatch(out, cnt, k.t, k.op, n) == cnt);
      CASE_CHECK(send.guard_ok() && recv.guard_ok());
      break;
    }
    case Collective::kAlltoall: {
      Buf send(n * cnt * es, k.misalign), recv(n * cnt * es, k.misalign);
      for (int p = 0; p < n; ++p) fill_codes(send.ptr + p * cnt * es, cnt, k.t, r, p);
      CASE_OK(bagua_alltoall(A(send.ptr), A(recv.ptr), cnt, k.t, comm, g_stream));
      for (int p = 0; p < n; ++p) CASE_CHECK(first_code_mismatch(recv.ptr + p * cnt * es, cnt, k.t, p, r) == cnt);
      CASE_CHECK(send.guard_ok() && recv.guard_ok());
      break;
    }
    case Collective::kAlltoallv: {
      std::vector<size_t> sc(n), sd(n), rc(n), rd(n);
      size_t s_total = 0, r_total = 0;
      for (int p = 0; p < n; ++p) {
        sc[p] = alltoallv_count(r, p, cnt);
        rc[p] = alltoallv_count(p, r, cnt);
        sd[p] = s_total;
        rd[p] = r_total;
        s_total += sc[p] + 1;  // a one-element gap between blocks
        r_total += rc[p] + 1;
      }
      Buf send(s_total * es, k.misalign), recv(r_total * es, k.misalign);
      for (int p = 0; p < n; ++p) fill_codes(send.ptr + sd[p] * es, sc[p], k.t, r, p);
      CASE_OK(
          bagua_alltoallv(A(send.ptr), sc.data(), sd.data(), A(recv.ptr), rc.data(), rd.data(), k.t, comm, g_stream));
      for (int p = 0; p < n; ++p) CASE_CHECK(first_code_mismatch(recv.ptr + rd[p] * es, rc[p], k.t, p, r) == rc[p]);
      CASE_CHECK(send.guard_ok() && recv.guard_ok());
      break;
    }
    case Collective::kGather: {
      Buf send(cnt * es, k.misalign), recv(n * cnt * es, k.misalign);
      unsigned char* in = (k.in_place && r == k.root) ? recv.ptr + r * cnt * es : send.ptr;
      fill_codes(in, cnt, k.t, r, 2);
      CASE_OK(bagua_gather(A(in), r == k.root ? A(recv.ptr) : nullptr, cnt, k.t, k.root, comm, g_stream));
      if (r == k.root)
        for (int b = 0; b < n; ++b) CASE_CHECK(first_code_mismatch(recv.ptr + b * cnt * es, cnt, k.t, b, 2) == cnt);
      CASE_CHECK(send.guard_ok() && recv.guard_ok());
      break;
    }
    case Collective::kScatter: {
      Buf send(n * cnt * es, k.misalign), recv(cnt * es, k.misalign);
      if (r == k.root)
        for (int b = 0; b < n; ++b) fill_codes(send.ptr + b * cnt * es, cnt, k.t, k.root, b);
      unsigned char* out = (k.in_place && r == k.root) ? send.ptr + r * cnt * es : recv.ptr;
      CASE_OK(bagua_scatter(r == k.root ? A(send.ptr) : nullptr, A(out), cnt, k.t, k.root, comm, g_stream));
      CASE_CHECK(first_code_mismatch(out, cnt, k.t, k.root, r) == cnt);
      CASE_CHECK(send.guard_ok() && recv.guard_ok());
      break;
    }
    default: break;
  }
}

bool reduces(Collective c) {
  return c == Collective::kAllreduce || c == Collective::kReduceScatter || c == Collective::kReduce;
}
bool per_rank_count(Collective c) {
  return c != Collective::kAllreduce && c != Collective::kBroadcast && c != Collective::kReduce;
}
bool has_in_place(Collective c) { return c != Collective::kAlltoall && c != Collective::kAlltoallv; }

void matrix(bagua_comm_t comm) {
  // On device memory the large case runs at 2^18 + 3: staging takes a whole buffer at once, so a larger count
  // adds only copy time (the host matrix covers the ~4M algorithms).
  const size_t big = g_memory == Memory::kHost ? size_t(1) << 22 : (size_t(1) << 18) + 3;
  const size_t counts[] = {0, 1, 7, 1023, 1025, big};
  long index = 0;
  for (int ci = 0; ci < static_cast<int>(Collective::kBarrier); ++ci) {
    auto c = static_cast<Collective>(ci);
    for (int t = 0; t < kNumDatatypes; ++t) {
      for (int o = 0; o < (reduces(c) ? kNumRedops : 1); ++o) {
        auto op = static_cast<bagua_redop_t>(o);
        for (size_t count : counts) {
          // The ~4M case runs sum and max only; the small ones run every op.
          if (count == big && reduces(c) && op != BAGUA_SUM && op != BAGUA_MAX) continue;
          size_t cnt = count == big && per_rank_count(c) ? big / g_size : count;
          for (int place = 0; place < (has_in_place(c) ? 2 : 1); ++place) {
            Case k{c,
                   static_cast<bagua_datatype_t>(t),
                   op,
                   cnt,
                   place == 1,
                   static_cast<int>(index % g_size),
                   index % 3 == 2};
            ++index;
            run_case(comm, k);
          }
        }
      }
    }
  }
  if (g_rank == 0) std::printf("matrix: %ld cases on %d ranks ok\n", g_cases, g_size);
}

void forced(const char* launcher_algo) {
  (void)launcher_algo;
  const size_t counts[] = {0, 1, 7, 1025, 300007};
  long before = g_cases;
  for (int ci = 0; ci < static_cast<int>(Collective::kCount); ++ci) {
    auto c = static_cast<Collective>(ci);
    for (Algorithm a : algorithms_of(c)) {
      if (!algorithm_supports(a, g_size)) continue;
      std::string spec = fmt::format("{}:{}", collective_name(c), algorithm_name(a));
      setenv("BAGUA_ALGO", spec.c_str(), 1);
      bagua_comm_t comm = nullptr;
      MP_OK(bagua_comm_init_from_env(&comm));
      if (c == Collective::kBarrier) {
        for (int i = 0; i < 10; ++i) MP_OK(bagua_barrier(comm, nullptr));
      }
      long index = 0;
      for (bagua_datatype_t t : {BAGUA_FLOAT32, BAGUA_INT32})
        for (bagua_redop_t op : {BAGUA_SUM, BAGUA_MAX})
          for (size_t count : counts)
            for (int place = 0; place < (has_in_place(c) ? 2 : 1); ++place) {
              if (c == Collective::kBarrier) continue;
              Case k{c, t, op, count, place == 1, static_cast<int>(index % g_size), index % 4 == 3};
              ++index;
              run_case(comm, k);
            }
      MP_OK(bagua_comm_destroy(comm));
    }
  }
  unsetenv("BAGUA_ALGO");
  if (g_rank == 0) std::printf("forced algorithms: %ld cases on %d ranks ok\n", g_cases - before, g_size);
}

// On several hosts: every hierarchical algorithm forced (BAGUA_ALGO) on the same cases as `forced`.
void hierarchical(bagua_comm_t world) {
  const HostLayout& hosts = world->impl->hosts();
  const size_t counts[] = {0, 1, 7, 1025, 300007};
  long before = g_cases;
  for (int ci = 0; ci < static_cast<int>(Collective::kCount); ++ci) {
    auto c = static_cast<Collective>(ci);
    for (Algorithm a : algorithms_of(c)) {
      if (std::string(a->name).rfind("hier", 0) != 0 || !algorithm_supports(a, g_size, hosts)) continue;
      setenv("BAGUA_ALGO", fmt::format("{}:{}", collective_name(c), algorithm_name(a)).c_str(), 1);
      bagua_comm_t comm = nullptr;
      MP_OK(bagua_comm_init_from_env(&comm));
      long index = 0;
      for (bagua_datatype_t t : {BAGUA_FLOAT32, BAGUA_INT32, BAGUA_FLOAT16})
        for (bagua_redop_t op : {BAGUA_SUM, BAGUA_MAX, BAGUA_AVG})
          for (size_t count : counts)
            for (int place = 0; place < 2; ++place) {
              if (!reduces(c) && op != BAGUA_SUM) continue;
              Case k{c, t, op, count, place == 1, static_cast<int>(index % g_size), index % 4 == 3};
              ++index;
              run_case(comm, k);
            }
      // Large enough for several pipeline segments (4 MiB each) in the two-host leader allreduce.
      if (c == Collective::kAllreduce)
        for (bagua_redop_t op : {BAGUA_SUM, BAGUA_AVG})
          for (int place = 0; place < 2; ++place)
            run_case(comm, Case{c, BAGUA_FLOAT32, op, 5000011, place == 1, 0, false});
      MP_OK(bagua_comm_destroy(comm));
    }
  }
  unsetenv("BAGUA_ALGO");
  if (g_rank == 0) std::printf("hierarchical algorithms: %ld cases on %zu hosts ok\n", g_cases - before, hosts.size());
}

void split(bagua_comm_t parent) {
  // Even and odd ranks, ordered by descending key; rank 0 also opts out of a second split.
  bagua_comm_t child = nullptr;
  MP_OK(bagua_comm_split(parent, g_rank % 2, -g_rank, &child));
  MP_CHECK(child != nullptr);
  int crank = -1, csize = -1;
  MP_OK(bagua_comm_rank(child, &crank));
  MP_OK(bagua_comm_size(child, &csize));
  int expected_size = (g_size + (g_rank % 2 == 0 ? 1 : 0)) / 2;
  MP_CHECK(csize == expected_size);
  // Descending key: the highest old rank of the color is child rank 0.
  int higher_same_color = 0;
  for (int r = g_rank + 2; r < g_size; r += 2) ++higher_same_color;
  MP_CHECK(crank == higher_same_color);
  // Child and parent in flight at once.
  int32_t child_val = g_rank, parent_val = 1;
  bagua_request_t child_req, parent_req;
  MP_OK(bagua_iallreduce(&child_val, &child_val, 1, BAGUA_INT32, BAGUA_SUM, child, &child_req));
  MP_OK(bagua_iallreduce(&parent_val, &parent_val, 1, BAGUA_INT32, BAGUA_SUM, parent, &parent_req));
  MP_OK(bagua_wait(parent_req));
  MP_OK(bagua_wait(child_req));
  int32_t want = 0;
  for (int r = g_rank % 2; r < g_size; r += 2) want += r;
  MP_CHECK(child_val == want);
  MP_CHECK(parent_val == g_size);
  bagua_comm_t none = reinterpret_cast<bagua_comm_t>(0x1);
  MP_OK(bagua_comm_split(parent, g_rank == 0 ? BAGUA_SPLIT_NOCOLOR : 7, 0, &none));
  MP_CHECK((g_rank == 0) == (none == nullptr));
  if (none) {
    int size = 0;
    MP_OK(bagua_comm_size(none, &size));
    MP_CHECK(size == g_size - 1);
    MP_OK(bagua_barrier(none, nullptr));
    MP_OK(bagua_comm_destroy(none));
  }
  MP_CHECK(bagua_comm_split(parent, -5, 0, &none) == BAGUA_ERR_INVALID_ARGUMENT);
  // Splitting with an operation of the parent still in flight is refused on every rank, with no side effect:
  // a receive that cannot complete before its matching send, which comes after everyone's attempt.
  int32_t v = -1, token = g_rank;
  bagua_request_t pending;
  int prev = (g_rank + g_size - 1) % g_size, next = (g_rank + 1) % g_size;
  MP_OK(bagua_irecv(&v, 1, BAGUA_INT32, prev, parent, &pending));
  MP_CHECK(bagua_comm_split(parent, 0, 0, &none) == BAGUA_ERR_INVALID_USAGE);
  MP_OK(bagua_barrier(parent, nullptr));  // no rank sends before every rank has tried
  MP_OK(bagua_send(&token, 1, BAGUA_INT32, next, parent, nullptr));
  MP_OK(bagua_wait(pending));
  MP_CHECK(v == prev);
  MP_OK(bagua_comm_destroy(child));
  if (g_rank == 0) std::printf("split: ok\n");
}

void groups(bagua_comm_t comm) {
  // Everyone sends to everyone with blocking calls in one group: deadlocks without the group.
  const size_t count = 100000;
  std::vector<std::vector<int32_t>> out(g_size, std::vector<int32_t>(count)), in(g_size, std::vector<int32_t>(count));
  for (int p = 0; p < g_size; ++p) fill_codes(out[p].data(), count, BAGUA_INT32, g_rank, p);
  MP_OK(bagua_group_start());
  for (int p = 0; p < g_size; ++p) MP_OK(bagua_send(out[p].data(), count, BAGUA_INT32, p, comm, nullptr));
  for (int p = g_size - 1; p >= 0; --p) MP_OK(bagua_recv(in[p].data(), count, BAGUA_INT32, p, comm, nullptr));
  // A collective inside the same (nested) group.
  int32_t total = 1;
  MP_OK(bagua_group_start());
  MP_OK(bagua_allreduce(&total, &total, 1, BAGUA_INT32, BAGUA_SUM, comm, nullptr));
  MP_OK(bagua_group_end());
  MP_OK(bagua_group_end());
  for (int p = 0; p < g_size; ++p) MP_CHECK(first_code_mismatch(in[p].data(), count, BAGUA_INT32, p, g_rank) == count);
  MP_CHECK(total == g_size);
  MP_CHECK(bagua_group_end() == BAGUA_ERR_INVALID_USAGE);
  // Receives first: they start in bagua_group_end, after the sends (docs/transport.md, "Sends first"); meanwhile
  // the open group still holds the communicator.
  for (int p = 0; p < g_size; ++p) {
    fill_codes(out[p].data(), count, BAGUA_INT32, g_rank + 32, p);
    std::fill(in[p].begin(), in[p].end(), -1);
  }
  MP_OK(bagua_group_start());
  for (int p = 0; p < g_size; ++p) MP_OK(bagua_recv(in[p].data(), count, BAGUA_INT32, p, comm, nullptr));
  MP_CHECK(bagua_comm_destroy(comm) == BAGUA_ERR_INVALID_USAGE);
  for (int p = 0; p < g_size; ++p) MP_OK(bagua_send(out[p].data(), count, BAGUA_INT32, p, comm, nullptr));
  MP_OK(bagua_group_end());
  for (int p = 0; p < g_size; ++p)
    MP_CHECK(first_code_mismatch(in[p].data(), count, BAGUA_INT32, p + 32, g_rank) == count);
  // A wait inside the group starts the receives first: the peer's send (single copy or rendezvous at this size)
  // completes only once this rank's receive is posted.
  const int next = (g_rank + 1) % g_size, prev = (g_rank + g_size - 1) % g_size;
  std::fill(in[prev].begin(), in[prev].end(), -1);
  bagua_request_t sent = nullptr;
  MP_OK(bagua_group_start());
  MP_OK(bagua_recv(in[prev].data(), count, BAGUA_INT32, prev, comm, nullptr));
  MP_OK(bagua_isend(out[next].data(), count, BAGUA_INT32, next, comm, &sent));
  MP_OK(bagua_wait(sent));
  MP_OK(bagua_group_end());
  MP_CHECK(first_code_mismatch(in[prev].data(), count, BAGUA_INT32, prev + 32, g_rank) == count);
  if (g_rank == 0) std::printf("groups: ok\n");
}

// Alltoall(v) through shared segments (algorithms/alltoall/shared_memory.cc), forced: operations in flight
// together take the segments in call order, also where one rank's call is on device memory and built later; blocks
// of several pieces (the last one partial) and empty ones arrive whole; a count mismatch that the call
// fingerprint does not catch (BAGUA_FINGERPRINT=0) is INVALID_USAGE on every rank, from the block lengths in the
// first round. Oracle: fill_codes per (sender, receiver, call).
void shared_memory_alltoall() {
  setenv("BAGUA_ALGO", "alltoall:shm;alltoallv:shm", 1);
  bagua_comm_t comm = nullptr;
  MP_OK(bagua_comm_init_from_env(&comm));
  MP_CHECK(comm->impl->shared_segments() != nullptr);  // white box: init mapped every rank's segment
  const size_t counts[] = {300007, 5, 131075, 0};
  const int calls = 4;
  std::vector<std::vector<int32_t>> out(calls), in(calls);
  auto fill = [&](int c) {
    out[c].assign(counts[c] * g_size, 0);
    in[c].assign(counts[c] * g_size + 1, -1);  // one guard element
    for (int p = 0; p < g_size; ++p)
      fill_codes(out[c].data() + p * counts[c], counts[c], BAGUA_INT32, g_rank + 16 * c, p);
  };
  auto check = [&](int c) {
    for (int p = 0; p < g_size; ++p)
      MP_CHECK(first_code_mismatch(in[c].data() + p * counts[c], counts[c], BAGUA_INT32, p + 16 * c, g_rank) ==
               counts[c]);
    MP_CHECK(in[c].back() == -1);
  };
  // Non-blocking, all in flight at once, finished in reverse order.
  std::vector<bagua_request_t> requests(calls);
  for (int c = 0; c < calls; ++c) {
    fill(c);
    MP_OK(bagua_ialltoall(out[c].data(), in[c].data(), counts[c], BAGUA_INT32, comm, &requests[c]));
  }
  for (int c = calls - 1; c >= 0; --c) MP_OK(bagua_wait(requests[c]));
  for (int c = 0; c < calls; ++c) check(c);
  // Blocking calls in one group.
  for (int c = 0; c < calls; ++c) fill(c);
  MP_OK(bagua_group_start());
  for (int c = 0; c < calls; ++c)
    MP_OK(bagua_alltoall(out[c].data(), in[c].data(), counts[c], BAGUA_INT32, comm, nullptr));
  MP_OK(bagua_group_end());
  for (int c = 0; c < calls; ++c) check(c);
  // alltoallv with blocks of different lengths (some empty, some of several pieces) in flight with an alltoall.
  {
    std::vector<size_t> sc(g_size), sd(g_size), rc(g_size), rd(g_size);
    size_t s_total = 0, r_total = 0;
    for (int p = 0; p < g_size; ++p) {
      sc[p] = alltoallv_count(g_rank, p, 400001);
      rc[p] = alltoallv_count(p, g_rank, 400001);
      sd[p] = s_total;
      rd[p] = r_total;
      s_total += sc[p];
      r_total += rc[p];
    }
    std::vector<int32_t> vout(s_total), vin(r_total + 1, -1);
    for (int p = 0; p < g_size; ++p) fill_codes(vout.data() + sd[p], sc[p], BAGUA_INT32, g_rank + 100, p);
    fill(0);
    bagua_request_t v = nullptr, plain = nullptr;
    MP_OK(bagua_ialltoallv(vout.data(), sc.data(), sd.data(), vin.data(), rc.data(), rd.data(), BAGUA_INT32, comm, &v));
    MP_OK(bagua_ialltoall(out[0].data(), in[0].data(), counts[0], BAGUA_INT32, comm, &plain));
    MP_OK(bagua_wait(plain));
    MP_OK(bagua_wait(v));
    for (int p = 0; p < g_size; ++p)
      MP_CHECK(first_code_mismatch(vin.data() + rd[p], rc[p], BAGUA_INT32, p + 100, g_rank) == rc[p]);
    MP_CHECK(vin.back() == -1);
    check(0);
  }
  // Turns follow call order across memory kinds: odd ranks make the first call on device memory, on a stream held
  // up for 2 ms (its schedule is built only when the stream gets there), and the second on host memory at once;
  // even ranks make both on host memory. (Run with the stand-in: BAGUA_DEVICE_STANDIN=1.)
  if (device_runtime().usable()) {
    const int c = 2;
    const size_t bytes = counts[c] * g_size * sizeof(int32_t);
    fill(c);
    fill(0);
    const bool on_device = g_rank % 2 == 1;
    void* stream = device_runtime().create_stream(0);
    void* dsend = nullptr;
    void* drecv = nullptr;
    if (on_device) {
      dsend = device_runtime().alloc_device(bytes, 0);
      drecv = device_runtime().alloc_device(bytes, 0);
      if (StandinControl* standin = standin_control())
        standin->run_on_stream(stream, [] { std::this_thread::sleep_for(std::chrono::milliseconds(2)); });
      device_runtime().copy_async(dsend, out[c].data(), bytes, stream);
      MP_OK(bagua_alltoall(dsend, drecv, counts[c], BAGUA_INT32, comm, stream));
    } else {
      MP_OK(bagua_alltoall(out[c].data(), in[c].data(), counts[c], BAGUA_INT32, comm, nullptr));
    }
    MP_OK(bagua_alltoall(out[0].data(), in[0].data(), counts[0], BAGUA_INT32, comm, nullptr));
    if (on_device) {
      device_runtime().copy_async(in[c].data(), drecv, bytes, stream);
      device_runtime().synchronize(stream, 120000);
      device_runtime().free_device(dsend);
      device_runtime().free_device(drecv);
    }
    device_runtime().destroy_stream(stream);
    check(c);
    check(0);
  }
  MP_OK(bagua_comm_destroy(comm));

  setenv("BAGUA_FINGERPRINT", "0", 1);
  MP_OK(bagua_comm_init_from_env(&comm));
  const size_t count = g_rank == g_size - 1 ? 100001 : 100000;
  std::vector<int32_t> send(100001 * g_size, 1), recv(100001 * g_size, 0);
  bagua_status_t status = bagua_alltoall(send.data(), recv.data(), count, BAGUA_INT32, comm, nullptr);
  std::string error = status == BAGUA_SUCCESS ? "" : bagua_get_last_error(comm);
  if (status != BAGUA_ERR_INVALID_USAGE || error.find("which expects") == std::string::npos) {
    std::fprintf(stderr, "rank %d: mismatched alltoall over shared memory gave %s: %s\n", g_rank,
                 bagua_status_string(status), error.c_str());
    std::exit(1);
  }
  MP_OK(bagua_comm_destroy(comm));
  unsetenv("BAGUA_FINGERPRINT");
  unsetenv("BAGUA_ALGO");
  if (g_rank == 0) std::printf("alltoall over shared memory: ok\n");
}

// Buffers freed and allocated again between calls (often at the same address, with new contents) must never
// see stale data: UCX's registration cache has to notice, as would any cache of ours.
void reallocated_buffers(bagua_comm_t comm) {
  const size_t count = 8 << 20;  // 32 MiB: large enough for zero-copy protocols
  for (int round = 0; round < 4; ++round) {
    auto* buf = static_cast<int32_t*>(std::malloc(count * sizeof(int32_t)));
    MP_CHECK(buf != nullptr);
    for (size_t i = 0; i < count; ++i) buf[i] = static_cast<int32_t>(i % 1000) * (round + 1) + g_rank;
    MP_OK(bagua_allreduce(buf, buf, count, BAGUA_INT32, BAGUA_SUM, comm, nullptr));
    int32_t rank_sum = g_size * (g_size - 1) / 2;
    for (size_t i = 0; i < count; ++i)
      if (buf[i] != static_cast<int32_t>(i % 1000) * (round + 1) * g_size + rank_sum) {
        std::fprintf(stderr, "rank %d: reallocated buffer round %d element %zu wrong\n", g_rank, round, i);
        std::exit(1);
      }
    std::free(buf);
  }
  if (g_rank == 0) std::printf("reallocated buffers: ok\n");
}

// On the network-namespace test bed: the layout bagua detected matches the launcher's, and every collective
// is exact at 1 MiB across hosts.
void netns(bagua_comm_t comm) {
  int local_rank = -1, local_size = -1;
  MP_OK(bagua_comm_local_rank(comm, &local_rank));
  MP_OK(bagua_comm_local_size(comm, &local_size));
  MP_CHECK(local_rank == mp_env_int("BAGUA_LOCAL_RANK"));
  MP_CHECK(local_size == mp_env_int("BAGUA_LOCAL_SIZE"));
  const bagua::Comm& c = *comm->impl;  // white box: the layout the algorithms see
  // The test bed says where it put every rank; host numbering is by first appearance in rank order.
  const char* placed = std::getenv("BAGUA_TESTBED_HOSTS");
  MP_CHECK(placed != nullptr);
  std::vector<int> host_of;
  for (const char* p = placed; *p;) {
    char* end = nullptr;
    host_of.push_back(static_cast<int>(std::strtol(p, &end, 10)));
    p = end;
    while (*p == ' ') ++p;
  }
  MP_CHECK(static_cast<int>(host_of.size()) == g_size);
  std::vector<int> renumber(g_size, -1);
  int next_host = 0;
  for (int r = 0; r < g_size; ++r)
    if (renumber[host_of[r]] < 0) renumber[host_of[r]] = next_host++;
  MP_CHECK(c.nhosts() == next_host);
  for (int r = 0; r < g_size; ++r) MP_CHECK(c.host_of(r) == renumber[host_of[r]]);
  const size_t bytes = 1 << 20;
  long index = 0;
  for (int ci = 0; ci < static_cast<int>(Collective::kBarrier); ++ci) {
    auto c2 = static_cast<Collective>(ci);
    for (bagua_datatype_t t : {BAGUA_FLOAT32, BAGUA_INT32, BAGUA_FLOAT16})
      for (bagua_redop_t op : {BAGUA_SUM, BAGUA_MAX}) {
        if (!reduces(c2) && op != BAGUA_SUM) continue;
        size_t count = bytes / datatype_size(t) / (per_rank_count(c2) ? g_size : 1);
        for (int place = 0; place < (has_in_place(c2) ? 2 : 1); ++place) {
          Case k{c2, t, op, count, place == 1, static_cast<int>(index % g_size), false};
          ++index;
          run_case(comm, k);
        }
      }
  }
  MP_OK(bagua_barrier(comm, nullptr));
  if (g_rank == 0)
    std::printf("netns: layout ok (%d hosts, %s), %ld collective cases exact at 1 MiB\n", c.nhosts(), placed, g_cases);
}

// On a shaped link: 16 MiB from rank 0 to the last rank (another host) cannot beat the link rate.
void shaped(bagua_comm_t comm) {
  const size_t bytes = 16 << 20;
  std::vector<char> buf(bytes, 1);
  MP_OK(bagua_barrier(comm, nullptr));
  auto start = std::chrono::steady_clock::now();
  if (g_rank == 0) MP_OK(bagua_send(buf.data(), bytes, BAGUA_UINT8, g_size - 1, comm, nullptr));
  if (g_rank == g_size - 1) MP_OK(bagua_recv(buf.data(), bytes, BAGUA_UINT8, 0, comm, nullptr));
  double seconds = mp_seconds_since(start);
  if (g_rank == g_size - 1) {
    std::printf("shaped: 16 MiB took %.3f s (1 Gbit/s allows no less than 0.134 s)\n", seconds);
    MP_CHECK(seconds >= 0.12);
  }
  MP_OK(bagua_barrier(comm, nullptr));
}

// Large allreduces (blocks of several 512 KiB pieces in the pipelined group allreduce), with whatever
// BAGUA_ALGO the test bed run forces; exact as everywhere else.
void large_allreduce(bagua_comm_t comm) {
  long before = g_cases;
  for (size_t count : {size_t(2 << 20) + 3, size_t(4) << 20})
    for (bagua_datatype_t t : {BAGUA_FLOAT32, BAGUA_INT32})
      for (bagua_redop_t op : {BAGUA_SUM, BAGUA_AVG})
        for (int place = 0; place < 2; ++place)
          run_case(comm, Case{Collective::kAllreduce, t, op, count, place == 1, 0, false});
  if (g_rank == 0)
    std::printf("large allreduce: %ld cases exact (BAGUA_ALGO=%s)\n", g_cases - before,
                std::getenv("BAGUA_ALGO") ? std::getenv("BAGUA_ALGO") : "auto");
}

// Calls on one communicator, each followed at once by a small allreduce on another: a rank that finished the first
// call blocks in the second, which progresses only that communicator. Whatever the first call sent must still reach
// its peers. Over TCP, UCX may hold a completed send's last bytes until its worker is progressed again, which the
// idle-progress thread does (BAGUA_IDLE_PROGRESS=0 shows the stall). Patterns: a pipelined allreduce (whatever
// BAGUA_ALGO says), a broadcast, and a send from rank 0 to the last rank, whose sender returns first, in one message
// and in 4 KiB pieces; and every sixth round an allreduce followed by a split of the same communicator.
void handoff(bagua_comm_t comm, int rounds) {
  bagua_comm_t other = nullptr;
  MP_OK(bagua_comm_split(comm, 0, g_rank, &other));
  const size_t count = (1 << 20) + 7;
  std::vector<float> data(count);
  auto value = [](int rank, int round, size_t i) { return static_cast<float>((rank + 1) * ((i + round) % 1024)); };
  auto meet = [&] {
    int32_t token = g_rank, total = 0;
    MP_OK(bagua_allreduce(&token, &total, 1, BAGUA_INT32, BAGUA_SUM, comm, nullptr));
    MP_CHECK(total == g_size * (g_size - 1) / 2);
  };
  for (int round = 0; round < rounds; ++round) {
    for (size_t i = 0; i < count; ++i) data[i] = value(g_rank, round, i);
    MP_OK(bagua_allreduce(data.data(), data.data(), count, BAGUA_FLOAT32, BAGUA_SUM, other, nullptr));
    meet();
    const float factor = static_cast<float>(g_size * (g_size + 1) / 2);
    for (size_t i = 0; i < count; ++i) MP_CHECK(data[i] == factor * static_cast<float>((i + round) % 1024));

    for (size_t i = 0; i < count; ++i) data[i] = g_rank == 0 ? value(0, round, i) : 0.0f;
    MP_OK(bagua_broadcast(data.data(), data.data(), count, BAGUA_FLOAT32, 0, other, nullptr));
    meet();
    for (size_t i = 0; i < count; ++i) MP_CHECK(data[i] == value(0, round, i));

    const int last = g_size - 1;
    if (g_rank == 0) {
      for (size_t i = 0; i < count; ++i) data[i] = value(0, round + 1, i);
      MP_OK(bagua_send(data.data(), count, BAGUA_FLOAT32, last, other, nullptr));
    } else if (g_rank == last) {
      MP_OK(bagua_recv(data.data(), count, BAGUA_FLOAT32, 0, other, nullptr));
      for (size_t i = 0; i < count; ++i) MP_CHECK(data[i] == value(0, round + 1, i));
    }
    meet();

    // Many small messages at once: the sender's calls complete as UCX takes each one, the last possibly in part.
    const size_t piece = 4096 / sizeof(float), pieces = count / piece;
    MP_OK(bagua_group_start());
    for (size_t p = 0; p < pieces; ++p) {
      if (g_rank == 0) MP_OK(bagua_send(&data[p * piece], piece, BAGUA_FLOAT32, last, other, nullptr));
      if (g_rank == last) MP_OK(bagua_recv(&data[p * piece], piece, BAGUA_FLOAT32, 0, other, nullptr));
    }
    MP_OK(bagua_group_end());
    if (g_rank == last)
      for (size_t i = 0; i < pieces * piece; ++i) MP_CHECK(data[i] == value(0, round + 1, i));
    meet();

    // A split of the same communicator right after a call on it (the split holds its engine while it waits).
    if (round % 6 == 5) {
      MP_OK(bagua_allreduce(data.data(), data.data(), count, BAGUA_FLOAT32, BAGUA_MAX, other, nullptr));
      bagua_comm_t child = nullptr;
      MP_OK(bagua_comm_split(other, 0, g_rank, &child));
      MP_OK(bagua_comm_destroy(child));
    }
  }
  MP_OK(bagua_comm_destroy(other));
  if (g_rank == 0) std::printf("handoff: %d rounds of 4 calls exact\n", rounds);
}

// Run with BAGUA_TIMEOUT=2 and BAGUA_ALGO=alltoall:shm, 2 ranks. Rank 0 starts a non-blocking alltoall that it does
// not wait on, then a blocking one, which waits for its turn behind the first; rank 1 never calls. The first is
// watched all the same: rank 0 gets TIMEOUT within the timeout and a margin, not a hang.
void turn(bagua_comm_t comm) {
  std::vector<int32_t> a(2048, 1), b(2048), c(2048, 1), d(2048);
  if (g_rank == 0) {
    bagua_request_t req = nullptr;
    MP_OK(bagua_ialltoall(a.data(), b.data(), 1024, BAGUA_INT32, comm, &req));
    auto start = std::chrono::steady_clock::now();
    bagua_status_t status = bagua_alltoall(c.data(), d.data(), 1024, BAGUA_INT32, comm, nullptr);
    double seconds = mp_seconds_since(start);
    std::printf("turn: the call waiting for its turn returned status %d after %.1f s: %s\n", static_cast<int>(status),
                seconds, bagua_get_last_error(comm));
    MP_CHECK(status == BAGUA_ERR_TIMEOUT);
    MP_CHECK(seconds < 5.0);
    MP_CHECK(bagua_wait(req) != BAGUA_SUCCESS);
  } else {
    std::this_thread::sleep_for(std::chrono::seconds(6));
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::string mode = argc > 1 ? argv[1] : "matrix";
  std::string memory = argc > 2 ? argv[2] : "host";
  bagua_comm_t comm = nullptr;
  MP_OK(bagua_comm_init_from_env(&comm));
  MP_OK(bagua_comm_rank(comm, &g_rank));
  MP_OK(bagua_comm_size(comm, &g_size));
  if (memory != "host") {
    if (!device_runtime().usable()) {
      if (g_rank == 0) std::printf("skipping: no CUDA device (BAGUA_DEVICE_STANDIN=1 runs the host stand-in)\n");
      MP_OK(bagua_comm_destroy(comm));
      return 77;
    }
    g_memory = memory == "mixed" ? Memory::kMixed : Memory::kDevice;
    g_stream = device_runtime().create_stream(0);
    if (g_rank == 0) std::printf("memory: %s, device runtime: %s\n", memory.c_str(), device_runtime().name());
  }
  if (mode == "matrix" && g_memory != Memory::kHost) {
    matrix(comm);
  } else if (mode == "matrix") {
    matrix(comm);
    split(comm);
    groups(comm);
    reallocated_buffers(comm);
  } else if (mode == "forced") {
    forced(nullptr);
  } else if (mode == "shm") {
    shared_memory_alltoall();
  } else if (mode == "netns") {
    netns(comm);
    hierarchical(comm);
  } else if (mode == "large") {
    large_allreduce(comm);
  } else if (mode == "shaped") {
    shaped(comm);
  } else if (mode == "handoff") {
    handoff(comm, argc > 3 ? std::atoi(argv[3]) : 30);
  } else if (mode == "turn") {
    turn(comm);
  }
  MP_OK(bagua_comm_destroy(comm));
  return 0;
}

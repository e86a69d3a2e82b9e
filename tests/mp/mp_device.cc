// Device-memory semantics (docs/cuda.md), on a GPU or on the host stand-in for the CUDA runtime
// (BAGUA_DEVICE_STANDIN=1). Under bagua-run -n N:
//   semantics  the call returns before the operation completes; two communicators on two streams; the legacy
//              default stream; non-blocking requests; send/recv and a collective in one group; many calls queued
//              without a synchronize; freed and reallocated buffers; NULL and mixed-kind arguments
//   failure [quantized]  rank 1 leaves with an operation in flight (an allreduce, or a quantized allreduce that
//              compresses on the device): the survivors' stream synchronize returns within BAGUA_TIMEOUT + 2 s and
//              the error is reported by the call's request and every later call
//   abort      abort from another thread while device work is enqueued that cannot finish
//   turn       a device alltoall waiting for its turn behind one whose stream is slow is not timed out
//   limit      a call larger than BAGUA_DEVICE_MEMORY_LIMIT is a clear error with no side effect; a group that
//              fits once idle staging is freed runs (run with BAGUA_ALGO=allreduce:ring, which always stages); a
//              quantized allreduce that would pass the limit compressing on the device is staged instead
//   relaxations  the quantized allreduce (fp32 and fp16, in and out of place, error feedback over several calls
//              queued on one stream without a synchronize), the neighbor allreduce and low-precision
//              decentralized SGD on device memory give bit for bit what the same calls give on host memory;
//              asynchronous averaging of a device buffer reaches the exact average
//   ipc [staged]  allreduces that the direct algorithm takes (one host): exact in and out of place, each through
//              IPC with the peers' buffers mapped once and reused, or with "staged" (ranks playing different
//              GPUs; "staged-open-fails": rank 1 cannot open handles) each staged; a rank on memory peers cannot map
//              makes every rank stage; every other collective through its peer_memory algorithm, exact, the same way;
//              more buffers than BAGUA_IPC_CACHE_ENTRIES (run with 2) are remapped after eviction
//   pipelined  staged calls of 4 MiB and more between logical hosts, with slow copies (BAGUA_STANDIN_COPY_US): each
//              copies its input in and its output out in pieces around the host algorithm (counted; each allreduce
//              starts steps before its input is all there and copies pieces out before its last step), exact:
//              allreduce in and out of place and averaged, allgather, reduce-scatter, broadcast; with
//              BAGUA_PIPELINED_STAGING=0, none is pipelined
//   lagging    (stand-in, BAGUA_STANDIN_WAIT_LAG_US, the proxy's path) a stream that reaches a call's gate only
//              after the call's communicator was destroyed passes it, and a communicator made next takes over its
//              gate page (counted); both calls are exact
// Without bagua-run:
//   threads    ranks as threads: two ranks on one stream are refused; a stream each works
//   capture    a stream being captured into a CUDA graph is refused with no side effect (stand-in only)
// Exits 77 when no device runtime is available.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "algorithms/quantized/codec.h"
#include "algorithms/quantized/quantized_allreduce.h"
#include "api/api_guard.h"
#include "core/device_proxy.h"
#include "kernels/device_runtime.h"
#include "mp/mp_check.h"

using namespace bagua;
using Clock = std::chrono::steady_clock;

// Inputs of the relaxation checks, exact in every float type (defined with them below).
std::vector<uint8_t> relaxation_input(size_t count, bagua_datatype_t dtype, int step);

namespace {

int g_rank = 0, g_size = 1;
DeviceRuntime* g_rt = nullptr;

// A device buffer of `count` int64 with its host image.
struct DevBuf {
  std::vector<int64_t> host;
  int64_t* dev = nullptr;
  explicit DevBuf(size_t count) : host(count, 0) {
    dev = static_cast<int64_t*>(g_rt->alloc_device(count * sizeof(int64_t), 0));
    MP_CHECK(dev != nullptr);
  }
  ~DevBuf() { g_rt->free_device(dev); }
  void upload(void* stream) { g_rt->copy_async(dev, host.data(), host.size() * sizeof(int64_t), stream); }
  void download(void* stream) { g_rt->copy_async(host.data(), dev, host.size() * sizeof(int64_t), stream); }
};

void sync(void* stream) { g_rt->synchronize(stream, 60000); }

double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// BAGUA_DEVICE_DATA_PATH=proxy: the in-host IPC path and compression on the device run (else every call stages on
// the caller's stream).
bool proxy_path(bagua_comm_t comm) { return !comm->impl->config().device_path_on_stream; }

int64_t rank_sum() { return static_cast<int64_t>(g_size) * (g_size - 1) / 2; }

void returns_before_completion(bagua_comm_t comm, void* stream) {
  DevBuf b(1 << 16);
  for (auto& v : b.host) v = g_rank;
  b.upload(stream);
  MP_OK(bagua_barrier(comm, nullptr));
  if (g_rank == 1) std::this_thread::sleep_for(std::chrono::milliseconds(400));
  auto start = Clock::now();
  MP_OK(bagua_allreduce(b.dev, b.dev, b.host.size(), BAGUA_INT64, BAGUA_SUM, comm, stream));
  double returned = since(start);
  b.download(stream);
  sync(stream);
  double completed = since(start);
  for (int64_t v : b.host) MP_CHECK(v == rank_sum());
  if (g_rank == 0) {
    std::printf("returns before completion: returned after %.1f ms, complete after %.1f ms\n", returned * 1e3,
                completed * 1e3);
    MP_CHECK(returned < 0.2);
    MP_CHECK(completed > 0.3);
  }
}

void two_comms_two_streams(bagua_comm_t comm) {
  bagua_comm_t other = nullptr;
  MP_OK(bagua_comm_split(comm, 0, g_size - g_rank, &other));  // reversed rank order
  void* s1 = g_rt->create_stream(0);
  void* s2 = g_rt->create_stream(0);
  DevBuf a(100003), b(70001);
  for (int round = 0; round < 5; ++round) {
    for (size_t i = 0; i < a.host.size(); ++i) a.host[i] = g_rank + static_cast<int64_t>(i) + round;
    for (size_t i = 0; i < b.host.size(); ++i) b.host[i] = g_rank * 2 - static_cast<int64_t>(i);
    a.upload(s1);
    b.upload(s2);
    MP_OK(bagua_allreduce(a.dev, a.dev, a.host.size(), BAGUA_INT64, BAGUA_SUM, comm, s1));
    MP_OK(bagua_allreduce(b.dev, b.dev, b.host.size(), BAGUA_INT64, BAGUA_MAX, other, s2));
    a.download(s1);
    b.download(s2);
    sync(s1);
    sync(s2);
    for (size_t i = 0; i < a.host.size(); ++i)
      MP_CHECK(a.host[i] == rank_sum() + g_size * (static_cast<int64_t>(i) + round));
    for (size_t i = 0; i < b.host.size(); ++i) MP_CHECK(b.host[i] == (g_size - 1) * 2 - static_cast<int64_t>(i));
  }
  MP_OK(bagua_comm_destroy(other));
  if (g_rank == 0) std::printf("two communicators on two streams: ok\n");
}

void legacy_stream_and_requests(bagua_comm_t comm) {
  DevBuf b(4099);
  for (auto& v : b.host) v = 1;
  b.upload(nullptr);
  MP_OK(bagua_allreduce(b.dev, b.dev, b.host.size(), BAGUA_INT64, BAGUA_SUM, comm, nullptr));
  // Non-blocking forms order on the legacy default stream; the request ends with the stream work.
  bagua_request_t req = nullptr;
  MP_OK(bagua_iallreduce(b.dev, b.dev, b.host.size(), BAGUA_INT64, BAGUA_SUM, comm, &req));
  MP_OK(bagua_wait(req));
  MP_OK(bagua_iallreduce(b.dev, b.dev, b.host.size(), BAGUA_INT64, BAGUA_SUM, comm, &req));
  int done = 0;
  for (auto start = Clock::now(); !done && since(start) < 30;) {
    bagua_status_t s = bagua_test(req, &done);
    MP_CHECK(s == (done ? BAGUA_SUCCESS : BAGUA_IN_PROGRESS));
  }
  MP_CHECK(done == 1);
  b.download(nullptr);
  sync(nullptr);
  for (int64_t v : b.host) MP_CHECK(v == static_cast<int64_t>(g_size) * g_size * g_size);
  if (g_rank == 0) std::printf("legacy default stream and requests: ok\n");
}

void group_send_recv(bagua_comm_t comm, void* stream) {
  const size_t count = 50000;
  std::vector<DevBuf*> out, in;
  for (int p = 0; p < g_size; ++p) {
    out.push_back(new DevBuf(count));
    in.push_back(new DevBuf(count));
    for (size_t i = 0; i < count; ++i) out[p]->host[i] = g_rank * 1000003 + p * 1009 + static_cast<int64_t>(i);
    out[p]->upload(stream);
  }
  DevBuf total(1);
  total.host[0] = 1;
  total.upload(stream);
  MP_OK(bagua_group_start());
  for (int p = 0; p < g_size; ++p) MP_OK(bagua_send(out[p]->dev, count, BAGUA_INT64, p, comm, stream));
  for (int p = g_size - 1; p >= 0; --p) MP_OK(bagua_recv(in[p]->dev, count, BAGUA_INT64, p, comm, stream));
  MP_OK(bagua_allreduce(total.dev, total.dev, 1, BAGUA_INT64, BAGUA_SUM, comm, stream));
  MP_OK(bagua_group_end());
  for (int p = 0; p < g_size; ++p) in[p]->download(stream);
  total.download(stream);
  sync(stream);
  for (int p = 0; p < g_size; ++p)
    for (size_t i = 0; i < count; ++i)
      MP_CHECK(in[p]->host[i] == p * 1000003 + g_rank * 1009 + static_cast<int64_t>(i));
  MP_CHECK(total.host[0] == g_size);
  for (int p = 0; p < g_size; ++p) {
    delete out[p];
    delete in[p];
  }
  if (g_rank == 0) std::printf("send/recv and allreduce in one group: ok\n");
}

// The non-blocking exchange MPI users write: irecv from the left, isend to the right, then wait for both. Requests
// do not park the stream, so neither call waits for the other.
void nonblocking_exchange(bagua_comm_t comm) {
  const size_t count = 30000;
  DevBuf out(count), in(count);
  for (size_t i = 0; i < count; ++i) out.host[i] = g_rank * 100000 + static_cast<int64_t>(i);
  out.upload(nullptr);
  int left = (g_rank + g_size - 1) % g_size, right = (g_rank + 1) % g_size;
  bagua_request_t recv_req = nullptr, send_req = nullptr;
  MP_OK(bagua_irecv(in.dev, count, BAGUA_INT64, left, comm, &recv_req));
  MP_OK(bagua_isend(out.dev, count, BAGUA_INT64, right, comm, &send_req));
  MP_OK(bagua_wait(recv_req));
  MP_OK(bagua_wait(send_req));
  in.download(nullptr);
  sync(nullptr);
  for (size_t i = 0; i < count; ++i) MP_CHECK(in.host[i] == left * 100000 + static_cast<int64_t>(i));
  if (g_rank == 0) std::printf("irecv, isend, wait on device memory: ok\n");
}

// One group of a blocking receive into host memory, a send request from device memory and a wait on it: the host
// receive is deferred to the group's end, so the wait must start it first or the neighbours wait on each other.
void group_host_recv_device_isend(bagua_comm_t comm) {
  const size_t count = 30000;
  DevBuf out(count);
  std::vector<int64_t> in(count, -1);
  for (size_t i = 0; i < count; ++i) out.host[i] = g_rank * 100000 + static_cast<int64_t>(i);
  out.upload(nullptr);
  sync(nullptr);
  int left = (g_rank + g_size - 1) % g_size, right = (g_rank + 1) % g_size;
  bagua_request_t send_req = nullptr;
  MP_OK(bagua_group_start());
  MP_OK(bagua_recv(in.data(), count, BAGUA_INT64, left, comm, nullptr));
  MP_OK(bagua_isend(out.dev, count, BAGUA_INT64, right, comm, &send_req));
  MP_OK(bagua_wait(send_req));
  MP_OK(bagua_group_end());
  for (size_t i = 0; i < count; ++i) MP_CHECK(in[i] == left * 100000 + static_cast<int64_t>(i));
  if (g_rank == 0) std::printf("host recv, device isend and its wait in one group: ok\n");
}

// One group holding allreduces of two communicators on one stream, listed in opposite orders on even and odd
// ranks: no rank's gate may hold the other communicator's call.
void group_two_comms(bagua_comm_t comm, void* stream) {
  bagua_comm_t other = nullptr;
  MP_OK(bagua_comm_split(comm, 0, 0, &other));
  DevBuf a(5000), b(7000);
  for (auto& v : a.host) v = 1;
  for (auto& v : b.host) v = 2;
  a.upload(stream);
  b.upload(stream);
  MP_OK(bagua_group_start());
  if (g_rank % 2 == 0) {
    MP_OK(bagua_allreduce(a.dev, a.dev, a.host.size(), BAGUA_INT64, BAGUA_SUM, comm, stream));
    MP_OK(bagua_allreduce(b.dev, b.dev, b.host.size(), BAGUA_INT64, BAGUA_SUM, other, stream));
  } else {
    MP_OK(bagua_allreduce(b.dev, b.dev, b.host.size(), BAGUA_INT64, BAGUA_SUM, other, stream));
    MP_OK(bagua_allreduce(a.dev, a.dev, a.host.size(), BAGUA_INT64, BAGUA_SUM, comm, stream));
  }
  // Destroying a communicator whose calls wait in the open group is refused.
  MP_CHECK(bagua_comm_destroy(other) == BAGUA_ERR_INVALID_USAGE);
  MP_OK(bagua_group_end());
  a.download(stream);
  b.download(stream);
  sync(stream);
  for (int64_t v : a.host) MP_CHECK(v == g_size);
  for (int64_t v : b.host) MP_CHECK(v == 2 * g_size);
  MP_OK(bagua_comm_destroy(other));
  if (g_rank == 0) std::printf("one group, two communicators in opposite orders on one stream: ok\n");
}

void queued_without_sync(bagua_comm_t comm, void* stream) {
  DevBuf b(1000);
  for (auto& v : b.host) v = 1;
  b.upload(stream);
  const int rounds = 20;  // g_size^20 <= 4^20 fits in int64
  for (int i = 0; i < rounds; ++i)
    MP_OK(bagua_allreduce(b.dev, b.dev, b.host.size(), BAGUA_INT64, BAGUA_SUM, comm, stream));
  b.download(stream);
  sync(stream);
  int64_t want = 1;
  for (int i = 0; i < rounds; ++i) want *= g_size;
  for (int64_t v : b.host) MP_CHECK(v == want);
  if (g_rank == 0) std::printf("%d calls queued without a synchronize: ok\n", rounds);
}

void reallocated(bagua_comm_t comm, void* stream) {
  for (int round = 0; round < 4; ++round) {
    DevBuf b(1 << 20);
    for (size_t i = 0; i < b.host.size(); ++i) b.host[i] = static_cast<int64_t>(i % 1000) * (round + 1) + g_rank;
    b.upload(stream);
    MP_OK(bagua_allreduce(b.dev, b.dev, b.host.size(), BAGUA_INT64, BAGUA_SUM, comm, stream));
    b.download(stream);
    sync(stream);
    for (size_t i = 0; i < b.host.size(); ++i)
      MP_CHECK(b.host[i] == static_cast<int64_t>(i % 1000) * (round + 1) * g_size + rank_sum());
  }
  if (g_rank == 0) std::printf("freed and reallocated buffers: ok\n");
}

void bad_arguments(bagua_comm_t comm, void* stream) {
  DevBuf b(16);
  std::vector<int64_t> host(16);
  MP_CHECK(bagua_allreduce(b.dev, host.data(), 16, BAGUA_INT64, BAGUA_SUM, comm, stream) == BAGUA_ERR_INVALID_ARGUMENT);
  MP_CHECK(std::strstr(bagua_get_last_error(comm), "host or device") != nullptr);
  MP_CHECK(bagua_allreduce(b.dev, nullptr, 16, BAGUA_INT64, BAGUA_SUM, comm, stream) == BAGUA_ERR_INVALID_ARGUMENT);
  // A relaxation with one buffer on each side.
  bagua_compression_t cfg = BAGUA_COMPRESSION_INITIALIZER;
  std::vector<float> floats(16);
  MP_CHECK(bagua_quantized_allreduce(b.dev, floats.data(), 16, BAGUA_FLOAT32, BAGUA_SUM, &cfg, nullptr, comm, stream) ==
           BAGUA_ERR_INVALID_ARGUMENT);
  // None of that had a side effect.
  queued_without_sync(comm, stream);
}

// More calls queued behind a held stream than one page of stream gates holds (1024): the proxy adds a page while
// the gates of the earlier calls are parked (none can open: each call's input waits for the held stream), and
// every call sums its own buffer exactly once. (Stand-in only: it can hold the stream.)
void many_queued(bagua_comm_t comm, void* stream) {
  StandinControl* standin = standin_control();
  if (standin == nullptr) return;
  const int calls = 1300;
  const size_t count = 4;
  DevBuf b(calls * count);
  for (size_t i = 0; i < b.host.size(); ++i) b.host[i] = g_rank * 100000 + static_cast<int64_t>(i);
  b.upload(stream);
  MP_OK(bagua_barrier(comm, nullptr));
  auto released = std::make_shared<std::atomic<bool>>(false);
  standin->run_on_stream(stream, [released] {  // held until every call is queued (at most 20 s)
    auto until = Clock::now() + std::chrono::seconds(20);
    while (!released->load() && Clock::now() < until) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  });
  for (int k = 0; k < calls; ++k)
    MP_OK(bagua_allreduce(b.dev + k * count, b.dev + k * count, count, BAGUA_INT64, BAGUA_SUM, comm, stream));
  released->store(true);
  b.download(stream);
  sync(stream);
  const int64_t ranks = rank_sum() * 100000;
  for (size_t i = 0; i < b.host.size(); ++i) MP_CHECK(b.host[i] == ranks + g_size * static_cast<int64_t>(i));
}

int semantics(bagua_comm_t comm) {
  void* stream = g_rt->create_stream(0);
  many_queued(comm, stream);
  returns_before_completion(comm, stream);
  two_comms_two_streams(comm);
  legacy_stream_and_requests(comm);
  group_send_recv(comm, stream);
  nonblocking_exchange(comm);
  group_host_recv_device_isend(comm);
  group_two_comms(comm, stream);
  reallocated(comm, stream);
  bad_arguments(comm, stream);
  bagua_stats_t stats{};
  stats.size = sizeof stats;
  MP_OK(bagua_comm_get_stats(comm, &stats));
  MP_CHECK(stats.ops[BAGUA_OPKIND_ALLREDUCE] >= 30 && stats.ops[BAGUA_OPKIND_SEND] >= static_cast<uint64_t>(g_size));
  return 0;
}

// Every rank enqueues a 32 MiB allreduce; rank 1 joins 200 ms late and leaves 5 ms after (at once for the quantized
// call), with the operation in flight everywhere. Run with BAGUA_TIMEOUT=4.
// quantized: the call in flight is a quantized allreduce with error feedback that compresses on the device (flat
// form), 2M floats (its first call moves the error feedback to device memory within BAGUA_TIMEOUT, which 8M floats
// overran once under ThreadSanitizer); its state is free again once the stream is released.
int failure(bagua_comm_t comm, bool quantized) {
  void* stream = g_rt->create_stream(0);
  DevBuf b(4 << 20);
  b.upload(stream);
  MP_OK(bagua_allreduce(b.dev, b.dev, 1024, BAGUA_INT64, BAGUA_SUM, comm, stream));
  sync(stream);
  MP_OK(bagua_barrier(comm, nullptr));
  const size_t floats = b.host.size() / 2;
  bagua_compression_t cfg = BAGUA_COMPRESSION_INITIALIZER;
  cfg.error_feedback = 1;
  cfg.hierarchical = BAGUA_HIERARCHICAL_OFF;
  bagua_qstate_t state = nullptr;
  if (quantized) MP_OK(bagua_qstate_create(comm, floats, BAGUA_FLOAT32, &cfg, &state));
  auto call_in_flight = [&] {
    if (quantized) {
      std::vector<float> halves(floats, 0.5f);
      g_rt->copy_async(b.dev, halves.data(), floats * 4, stream);
      sync(stream);
      MP_OK(bagua_quantized_allreduce(b.dev, b.dev, floats, BAGUA_FLOAT32, BAGUA_SUM, &cfg, state, comm, stream));
    } else {
      MP_OK(bagua_allreduce(b.dev, b.dev, b.host.size(), BAGUA_INT64, BAGUA_SUM, comm, stream));
    }
  };
  if (quantized) {  // one that completes, compressed on the device
    const uint64_t before = comm->impl->device_proxy().compressed_on_device();
    call_in_flight();
    sync(stream);
    MP_CHECK(comm->impl->device_proxy().compressed_on_device() == before + 1);  // (on either data path)
  }
  if (g_rank == 1) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    call_in_flight();
    // (a quantized call of 2M floats can end within 5 ms: it leaves at once, before sending its blocks)
    if (!quantized) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    std::printf("rank 1: leaving with %s in flight\n", quantized ? "a quantized allreduce" : "an allreduce");
    std::fflush(stdout);
    _exit(0);
  }
  auto start = Clock::now();
  bagua_request_t req = nullptr;
  call_in_flight();
  MP_OK(bagua_iallreduce(b.dev, b.dev, 1024, BAGUA_INT64, BAGUA_SUM, comm, &req));
  sync(stream);
  double took = since(start);
  bagua_status_t req_status = bagua_wait(req);
  bagua_status_t async = BAGUA_SUCCESS;
  MP_OK(bagua_comm_get_async_error(comm, &async));
  bagua_status_t later = bagua_allreduce(b.dev, b.dev, 1, BAGUA_INT64, BAGUA_SUM, comm, stream);
  std::printf("rank %d: stream released %.2f s after the call; async error %s; request %s; later call %s (%s)\n",
              g_rank, took, bagua_status_string(async), bagua_status_string(req_status), bagua_status_string(later),
              bagua_get_last_error(comm));
  MP_CHECK(took < 0.2 + 4.0 + 2.0);
  MP_CHECK(async == BAGUA_ERR_REMOTE || async == BAGUA_ERR_TIMEOUT);
  MP_CHECK(req_status == async);
  MP_CHECK(later == async);
  if (quantized) {
    auto deadline = Clock::now() + std::chrono::seconds(10);
    bagua_status_t st;
    while ((st = bagua_qstate_destroy(state)) != BAGUA_SUCCESS && Clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    MP_CHECK(st == BAGUA_SUCCESS);
  }
  MP_OK(bagua_comm_destroy(comm));
  return 0;
}

// Rank 0 enqueues an allreduce that rank 1 never joins (and a non-blocking one, left out until after the
// communicator's destroy: its wait then returns ABORTED without touching the freed communicator), then a second
// thread aborts.
int abort_enqueued(bagua_comm_t comm) {
  void* stream = g_rt->create_stream(0);
  DevBuf b(1 << 16);
  b.upload(stream);
  sync(stream);
  bagua_request_t left_out = nullptr;
  if (g_rank == 0) {
    MP_OK(bagua_allreduce(b.dev, b.dev, b.host.size(), BAGUA_INT64, BAGUA_SUM, comm, stream));
    MP_OK(bagua_allreduce(b.dev, b.dev, b.host.size(), BAGUA_INT64, BAGUA_SUM, comm, stream));
    MP_OK(bagua_iallreduce(b.dev, b.dev, b.host.size(), BAGUA_INT64, BAGUA_SUM, comm, &left_out));
    std::thread aborter([comm] {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      MP_OK(bagua_comm_abort(comm));
    });
    auto start = Clock::now();
    sync(stream);
    double took = since(start);
    aborter.join();
    bagua_status_t async = BAGUA_SUCCESS;
    MP_OK(bagua_comm_get_async_error(comm, &async));
    std::printf("abort: stream released %.2f s after the calls (abort at 0.3 s), async error %s\n", took,
                bagua_status_string(async));
    MP_CHECK(took < 2.5);
    MP_CHECK(async == BAGUA_ERR_ABORTED);
  } else {
    // The abort reaches this rank through the bootstrap ring.
    bagua_status_t async = BAGUA_SUCCESS;
    for (auto start = Clock::now(); async == BAGUA_SUCCESS && since(start) < 10;) {
      MP_OK(bagua_comm_get_async_error(comm, &async));
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    MP_CHECK(async != BAGUA_SUCCESS);
  }
  MP_OK(bagua_comm_destroy(comm));
  if (left_out != nullptr) {
    MP_CHECK(bagua_wait(left_out) == BAGUA_ERR_ABORTED);
    MP_CHECK(std::strlen(bagua_get_last_error(nullptr)) > 0);
  }
  return 0;
}

// A flat quantized allreduce with error feedback (the default format) and two states of count floats for it: the
// oracle's on host memory and the device calls'.
struct FlatStates {
  bagua_compression_t cfg = BAGUA_COMPRESSION_INITIALIZER;
  bagua_qstate_t host = nullptr, dev = nullptr;
  FlatStates(bagua_comm_t comm, size_t count) {
    cfg.error_feedback = 1;
    cfg.hierarchical = BAGUA_HIERARCHICAL_OFF;
    MP_OK(bagua_qstate_create(comm, count, BAGUA_FLOAT32, &cfg, &host));
    MP_OK(bagua_qstate_create(comm, count, BAGUA_FLOAT32, &cfg, &dev));
  }
  ~FlatStates() {
    MP_OK(bagua_qstate_destroy(host));
    MP_OK(bagua_qstate_destroy(dev));
  }
};

uint64_t through_ipc(bagua_comm_t comm);

// Run with BAGUA_STANDIN_BLOCKING_COPIES=1, BAGUA_TIMEOUT=2, BAGUA_STANDIN_COPY_US=200000 and
// BAGUA_ALGO=allreduce:0-512K:ring,512K-2M:direct,2M-:ring (docs/cuda.md, "What a parked stream blocks"). Each rank
// copies its result to pageable memory right after the call, as the tests did on the H200: that copy holds the
// stand-in's driver lock until the parked stream moves.
// - BAGUA_DEVICE_DATA_PATH=stream: calls staged on the caller's stream need no CUDA call from the proxy thread: they
//   complete, exact. So do an 8 MiB call whose copies go in pieces (each input piece with a word, each output piece
//   behind a gate), a call while an 8 MiB request is in flight, and the direct allreduce of 1 MiB (staged, then
//   through IPC).
// - BAGUA_DEVICE_DATA_PATH=proxy: the proxy thread makes every call's copies, and they wait for the lock: the
//   monitor releases the stream after BAGUA_TIMEOUT + 2 s; the download returns and the communicator fails, naming
//   the cause, instead of hanging.
int blocked(bagua_comm_t comm) {
  void* stream = g_rt->create_stream(0);
  // A rank whose proxy thread is stuck is released by its monitor after BAGUA_TIMEOUT + 2 s; its peer's watchdog
  // gives up waiting for it after BAGUA_TIMEOUT (a peer's TIMEOUT stays TIMEOUT).
  auto released_by_monitor = [&](double released, const char* what) {
    bagua_status_t async = BAGUA_SUCCESS;
    for (auto wait = Clock::now(); async == BAGUA_SUCCESS && since(wait) < 10;) {
      MP_OK(bagua_comm_get_async_error(comm, &async));
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    MP_CHECK(async == BAGUA_ERR_TIMEOUT);
    MP_CHECK(released > 1.5 && released < 8);
    std::vector<int64_t> host(4, 1);
    MP_CHECK(bagua_allreduce(host.data(), host.data(), host.size(), BAGUA_INT64, BAGUA_SUM, comm, nullptr) == async);
    const std::string error = bagua_get_last_error(comm);
    MP_CHECK(error.find("inside a CUDA call") != std::string::npos || error.find("no progress") != std::string::npos);
    std::printf("blocked: rank %d: %s: the stream was released after %.1f s; %s\n", g_rank, what, released,
                error.c_str());
    bagua_comm_destroy(comm);
    return 0;
  };
  if (proxy_path(comm)) {
    DevBuf b(1 << 12);
    b.upload(stream);
    auto start = Clock::now();
    MP_OK(bagua_allreduce(b.dev, b.dev, b.host.size(), BAGUA_INT64, BAGUA_SUM, comm, stream));
    b.download(stream);
    return released_by_monitor(since(start), "a call on the proxy's data path");
  }
  {
    DevBuf b(1 << 12);
    for (auto& v : b.host) v = g_rank + 1;
    b.upload(stream);  // pageable: returns once the (idle) stream has run it
    auto start = Clock::now();
    MP_OK(bagua_allreduce(b.dev, b.dev, b.host.size(), BAGUA_INT64, BAGUA_SUM, comm, stream));
    b.download(stream);
    const double took = since(start);
    for (int64_t v : b.host) MP_CHECK(v == static_cast<int64_t>(g_size) * (g_size + 1) / 2);
    MP_CHECK(took < 1.8);  // copies of 200 ms, no timeout
    if (g_rank == 0) std::printf("blocked: a call staged on the caller's stream completed in %.2f s, exact\n", took);
  }
  {
    // Two such calls queued, then the download: the first one ends while the thread waits in the second's download
    // (an operation that kept a CUDA event would block destroying it).
    DevBuf a(1 << 10), b(1 << 11);
    for (auto& v : a.host) v = g_rank + 2;
    for (auto& v : b.host) v = g_rank + 3;
    a.upload(stream);
    b.upload(stream);
    auto start = Clock::now();
    MP_OK(bagua_allreduce(a.dev, a.dev, a.host.size(), BAGUA_INT64, BAGUA_SUM, comm, stream));
    MP_OK(bagua_allreduce(b.dev, b.dev, b.host.size(), BAGUA_INT64, BAGUA_SUM, comm, stream));
    b.download(stream);
    a.download(stream);
    const double took = since(start);
    for (int64_t v : a.host) MP_CHECK(v == static_cast<int64_t>(g_size) * (g_size + 3) / 2);
    for (int64_t v : b.host) MP_CHECK(v == static_cast<int64_t>(g_size) * (g_size + 5) / 2);
    MP_CHECK(took < 2.5);
    if (g_rank == 0) std::printf("blocked: two queued calls completed in %.2f s, exact\n", took);
  }
  DeviceProxy& proxy = comm->impl->device_proxy();
  {
    // Two quantized allreduces with error feedback that compress on the caller's stream (kernels in three phases
    // around two gates each), queued, then the downloads: the proxy thread makes no CUDA call for them. Oracle: the
    // same calls on a host state, byte for byte.
    const size_t count = 1 << 16, bytes = count * 4;
    FlatStates states(comm, count);
    const bagua_compression_t cfg = states.cfg;
    bagua_qstate_t host_state = states.host, dev_state = states.dev;
    std::vector<std::vector<uint8_t>> want(2), got(2, std::vector<uint8_t>(bytes));
    std::vector<void*> dev(2);
    for (int step = 0; step < 2; ++step) {
      want[step] = relaxation_input(count, BAGUA_FLOAT32, step);
      dev[step] = g_rt->alloc_device(bytes, 0);
      g_rt->copy_async(dev[step], want[step].data(), bytes, stream);
      MP_OK(bagua_quantized_allreduce(want[step].data(), want[step].data(), count, BAGUA_FLOAT32, BAGUA_SUM, &cfg,
                                      host_state, comm, nullptr));
    }
    const uint64_t on_device = proxy.compressed_on_device();
    bagua_stats_t stats_before{}, stats_after{};
    stats_before.size = stats_after.size = sizeof(bagua_stats_t);
    MP_OK(bagua_comm_get_stats(comm, &stats_before));
    auto start = Clock::now();
    for (int step = 0; step < 2; ++step)
      MP_OK(bagua_quantized_allreduce(dev[step], dev[step], count, BAGUA_FLOAT32, BAGUA_SUM, &cfg, dev_state, comm,
                                      stream));
    for (int step = 0; step < 2; ++step) g_rt->copy_async(got[step].data(), dev[step], bytes, stream);
    const double took = since(start);
    MP_CHECK(got == want);
    MP_CHECK(proxy.compressed_on_device() == on_device + 2);
    MP_CHECK(took < 2.5);  // two copies of 200 ms, no timeout
    MP_OK(bagua_comm_get_stats(comm, &stats_after));
    MP_CHECK(stats_after.compute_ns == stats_before.compute_ns);  // (BAGUA_DEVICE_TIMING is off: nothing timed)
    if (g_rank == 0)
      std::printf("blocked: two quantized allreduces compressed on the caller's stream completed in %.2f s, exact\n",
                  took);
    for (void* d : dev) g_rt->free_device(d);
  }
  {
    // 8 MiB: 8 input pieces of 1 MiB, each followed by its word, and 8 output pieces, each behind its gate.
    DevBuf b(1 << 20);
    for (size_t i = 0; i < b.host.size(); ++i) b.host[i] = static_cast<int64_t>(i % 1000) * (g_rank + 1);
    b.upload(stream);
    const uint64_t pipelined = proxy.pipelined_calls(), early = proxy.early_output_pieces();
    auto start = Clock::now();
    MP_OK(bagua_allreduce(b.dev, b.dev, b.host.size(), BAGUA_INT64, BAGUA_SUM, comm, stream));
    b.download(stream);
    const double took = since(start);
    const int64_t ranks_sum = static_cast<int64_t>(g_size) * (g_size + 1) / 2;
    for (size_t i = 0; i < b.host.size(); ++i) MP_CHECK(b.host[i] == static_cast<int64_t>(i % 1000) * ranks_sum);
    // Copies of 200 ms each, one after another on the stream: 16 of them, about 3.4 s.
    MP_CHECK(took < 8);
    MP_CHECK(proxy.pipelined_calls() == pipelined + 1);
    if (g_rank == 0)
      std::printf(
          "blocked: an 8 MiB call in pieces on the caller's stream completed in %.2f s, exact (%llu of 8 "
          "output pieces copied back early)\n",
          took, static_cast<unsigned long long>(proxy.early_output_pieces() - early));
  }
  {
    // A request of 8 MiB (its input in pieces; it parks no stream), then a call on the stream and the download
    // behind that call: the proxy thread makes no CUDA call for either, so the call completes while the request is
    // in flight, and the wait copies the request's output back on this thread. Exact.
    DevBuf r(1 << 20), b(1 << 10);
    for (size_t i = 0; i < r.host.size(); ++i) r.host[i] = static_cast<int64_t>(i % 1000) * (g_rank + 1);
    for (auto& v : b.host) v = g_rank + 4;
    r.upload(stream);
    b.upload(stream);
    sync(stream);
    // The ranks start together: the uploads of 200 ms copies had left one rank a second behind under TSan, and its
    // peer's watchdog (BAGUA_TIMEOUT=2) then counted that second too.
    MP_OK(bagua_barrier(comm, nullptr));
    bagua_request_t req = nullptr;
    auto start = Clock::now();
    MP_OK(bagua_iallreduce(r.dev, r.dev, r.host.size(), BAGUA_INT64, BAGUA_SUM, comm, &req));
    MP_OK(bagua_allreduce(b.dev, b.dev, b.host.size(), BAGUA_INT64, BAGUA_SUM, comm, stream));
    b.download(stream);
    const double call_took = since(start);
    for (int64_t v : b.host) MP_CHECK(v == static_cast<int64_t>(g_size) * (g_size + 7) / 2);
    MP_OK(bagua_wait(req));
    const double request_took = since(start);
    r.download(stream);
    const int64_t ranks_sum = static_cast<int64_t>(g_size) * (g_size + 1) / 2;
    for (size_t i = 0; i < r.host.size(); ++i) MP_CHECK(r.host[i] == static_cast<int64_t>(i % 1000) * ranks_sum);
    MP_CHECK(request_took < 8);
    if (g_rank == 0)
      std::printf(
          "blocked: a call on the stream completed in %.2f s while an 8 MiB request was in flight; the "
          "request completed in %.2f s, exact\n",
          call_took, request_took);
  }
  // The direct allreduce of 1 MiB on the in-host path: a new buffer staged, then the same one through IPC.
  DevBuf b(1 << 17);
  for (int pass = 0; pass < 2; ++pass) {
    const uint64_t ipc_before = through_ipc(comm);
    for (auto& v : b.host) v = g_rank + 1 + pass;
    b.upload(stream);
    auto start = Clock::now();
    MP_OK(bagua_allreduce(b.dev, b.dev, b.host.size(), BAGUA_INT64, BAGUA_SUM, comm, stream));
    b.download(stream);  // waits for the parked stream, holding the lock
    const double released = since(start);
    for (int64_t v : b.host) MP_CHECK(v == static_cast<int64_t>(g_size) * (g_size + 1 + 2 * pass) / 2);
    MP_CHECK(released < 1.8);
    MP_CHECK(through_ipc(comm) - ipc_before == static_cast<uint64_t>(pass));
    if (g_rank == 0)
      std::printf("blocked: the direct allreduce %s on the stream in %.2f s, exact\n", pass ? "through IPC" : "staged",
                  released);
  }
  MP_OK(bagua_comm_destroy(comm));
  return 0;
}

// Run with BAGUA_DEVICE_MEMORY_LIMIT=1048576.
int limit(bagua_comm_t comm) {
  void* stream = g_rt->create_stream(0);
  DevBuf big(1 << 18);  // 2 MiB
  MP_CHECK(bagua_allreduce(big.dev, big.dev, big.host.size(), BAGUA_INT64, BAGUA_SUM, comm, stream) ==
           BAGUA_ERR_SYSTEM);
  std::string error = bagua_get_last_error(comm);
  MP_CHECK(error.find("BAGUA_DEVICE_MEMORY_LIMIT") != std::string::npos);
  if (g_rank == 0) std::printf("limit: %s\n", error.c_str());
  queued_without_sync(comm, stream);  // no side effect: the ranks are still in step
  // Sizes that do not reuse each other's blocks: the pool frees idle blocks to make room.
  for (size_t count : {size_t(70000), size_t(40000), size_t(100000), size_t(20000), size_t(110000)}) {
    DevBuf b(count);
    for (auto& v : b.host) v = 3;
    b.upload(stream);
    MP_OK(bagua_allreduce(b.dev, b.dev, count, BAGUA_INT64, BAGUA_SUM, comm, stream));
    b.download(stream);
    sync(stream);
    for (int64_t v : b.host) MP_CHECK(v == 3 * g_size);
  }
  // A group that fits the limit only once the idle block of the last call (880000 bytes, too large to reuse for
  // either call) is freed: a call of the group holds staging when the second one needs room.
  {
    DevBuf a(20000), b(30000);
    for (auto& v : a.host) v = 5;
    for (auto& v : b.host) v = 7;
    a.upload(stream);
    b.upload(stream);
    MP_OK(bagua_group_start());
    MP_OK(bagua_allreduce(a.dev, a.dev, 20000, BAGUA_INT64, BAGUA_SUM, comm, stream));
    MP_OK(bagua_allreduce(b.dev, b.dev, 30000, BAGUA_INT64, BAGUA_SUM, comm, stream));
    MP_OK(bagua_group_end());
    a.download(stream);
    b.download(stream);
    sync(stream);
    for (int64_t v : a.host) MP_CHECK(v == 5 * g_size);
    for (int64_t v : b.host) MP_CHECK(v == 7 * g_size);
  }
  // A group whose calls together need more than the limit: the call that does not fit fails at once (its group's
  // own calls hold the staging), with no side effect.
  DevBuf x(100000), y(100000);
  MP_OK(bagua_group_start());
  MP_OK(bagua_allreduce(x.dev, x.dev, 100000, BAGUA_INT64, BAGUA_SUM, comm, stream));
  MP_CHECK(bagua_allreduce(y.dev, y.dev, 100000, BAGUA_INT64, BAGUA_SUM, comm, stream) == BAGUA_ERR_SYSTEM);
  MP_CHECK(std::strstr(bagua_get_last_error(comm), "open group") != nullptr);
  MP_OK(bagua_group_end());
  sync(stream);
  // A quantized allreduce whose compression on the device would need more than the 1 MiB limit (an fp32 copy of
  // 250000 fp16 values, 1 MB, plus the compressed blocks) is staged instead (500 KB in place): it runs, equal to the
  // host call; one of 100000 values compresses on the device (counted).
  {
    bagua_compression_t cfg = BAGUA_COMPRESSION_INITIALIZER;
    for (size_t count : {size_t{250000}, size_t{100000}}) {
      const uint64_t before = comm->impl->device_proxy().compressed_on_device();
      std::vector<uint8_t> host = relaxation_input(count, BAGUA_FLOAT16, 0), got(host.size());
      void* dev = g_rt->alloc_device(host.size(), 0);
      g_rt->copy_async(dev, host.data(), host.size(), stream);
      MP_OK(bagua_quantized_allreduce(dev, dev, count, BAGUA_FLOAT16, BAGUA_SUM, &cfg, nullptr, comm, stream));
      g_rt->copy_async(got.data(), dev, host.size(), stream);
      sync(stream);
      MP_OK(bagua_quantized_allreduce(host.data(), host.data(), count, BAGUA_FLOAT16, BAGUA_SUM, &cfg, nullptr, comm,
                                      nullptr));
      MP_CHECK(got == host);
      MP_CHECK(comm->impl->device_proxy().compressed_on_device() == before + (count == 100000 ? 1 : 0));
      g_rt->free_device(dev);
    }
  }
  queued_without_sync(comm, stream);
  MP_OK(bagua_comm_destroy(comm));
  return 0;
}

uint64_t ipc_opened(bagua_comm_t comm) { return comm->impl->device_proxy().ipc_cache().opened(); }
uint64_t through_ipc(bagua_comm_t comm) { return comm->impl->device_proxy().in_host_through_ipc(); }
uint64_t staged(bagua_comm_t comm) { return comm->impl->device_proxy().in_host_staged(); }

// One allreduce of b into out (b itself in place) with values that make the sum exact; checks every element.
void exact_allreduce(bagua_comm_t comm, void* stream, DevBuf& b, DevBuf* out, int salt) {
  for (size_t i = 0; i < b.host.size(); ++i) b.host[i] = static_cast<int64_t>(i % 4099) * (salt + 1) + g_rank;
  b.upload(stream);
  DevBuf& result = out ? *out : b;
  MP_OK(bagua_allreduce(b.dev, result.dev, b.host.size(), BAGUA_INT64, BAGUA_SUM, comm, stream));
  result.download(stream);
  sync(stream);
  for (size_t i = 0; i < b.host.size(); ++i)
    MP_CHECK(result.host[i] == static_cast<int64_t>(i % 4099) * (salt + 1) * g_size + rank_sum());
}

// Rank r's element i of a collective's input (sums of any ranks stay exact in int64).
int64_t value(int r, size_t i) { return static_cast<int64_t>(i) * 7 + r * 1000003; }
int64_t value_sum(size_t i) {
  int64_t sum = 0;
  for (int r = 0; r < g_size; ++r) sum += value(r, i);
  return sum;
}

// Every other collective at a size its peer_memory algorithm takes on one host (alltoall and alltoallv forced:
// shared memory wins on host memory), exact, in and out of place where the call has both; went(calls, rank 1 maps
// nothing) checks how the calls went (a broadcast or scatter from rank 1 maps nothing there). alltoallv leaves gaps
// in its receive buffer that must keep their contents.
void every_collective(bagua_comm_t comm, void* stream, const std::function<void(uint64_t, bool)>& went) {
  const size_t c = 70000;  // per block: 560 KB (the model takes peer_memory from 1 MiB in all)
  const int n = g_size, me = g_rank;
  const size_t all = c * static_cast<size_t>(n);
  auto fill = [](DevBuf& b, int r) {
    for (size_t i = 0; i < b.host.size(); ++i) b.host[i] = value(r, i);
  };
  auto fetch = [&](DevBuf& b) {
    b.download(stream);
    sync(stream);
  };
  for (bool in_place : {false, true}) {
    // allgather: block r is rank r's input.
    DevBuf big(all), small(c);
    for (size_t i = 0; i < c; ++i) small.host[i] = big.host[me * c + i] = value(me, i);
    big.upload(stream);
    small.upload(stream);
    MP_OK(bagua_allgather(in_place ? big.dev + me * c : small.dev, big.dev, c, BAGUA_INT64, comm, stream));
    fetch(big);
    for (int r = 0; r < n; ++r)
      for (size_t i = 0; i < c; ++i) MP_CHECK(big.host[r * c + i] == value(r, i));
    // reduce_scatter: rank r gets block r of the sum.
    fill(big, me);
    big.upload(stream);
    MP_OK(bagua_reduce_scatter(big.dev, in_place ? big.dev + me * c : small.dev, c, BAGUA_INT64, BAGUA_SUM, comm,
                               stream));
    DevBuf& scattered = in_place ? big : small;
    fetch(scattered);
    for (size_t i = 0; i < c; ++i) MP_CHECK(scattered.host[(in_place ? me * c : 0) + i] == value_sum(me * c + i));
    went(2, false);
    // broadcast from rank 1, reduce to rank n - 1.
    DevBuf a(c), b(c);
    fill(a, me);
    a.upload(stream);
    MP_OK(bagua_broadcast(a.dev, in_place ? a.dev : b.dev, c, BAGUA_INT64, 1, comm, stream));
    DevBuf& got = in_place ? a : b;
    fetch(got);
    for (size_t i = 0; i < c; ++i) MP_CHECK(got.host[i] == value(1, i));
    went(1, true);
    fill(a, me);
    a.upload(stream);
    MP_OK(bagua_reduce(a.dev, in_place ? a.dev : b.dev, c, BAGUA_INT64, BAGUA_SUM, n - 1, comm, stream));
    if (me == n - 1) {
      fetch(got);
      for (size_t i = 0; i < c; ++i) MP_CHECK(got.host[i] == value_sum(i));
    }
    went(1, false);
    // gather to rank 0, scatter from rank 1.
    fill(small, me);
    small.upload(stream);
    if (me == 0 && in_place) {
      for (size_t i = 0; i < c; ++i) big.host[me * c + i] = value(me, i);
      big.upload(stream);
    }
    MP_OK(bagua_gather(in_place && me == 0 ? big.dev + me * c : small.dev, big.dev, c, BAGUA_INT64, 0, comm, stream));
    if (me == 0) {
      fetch(big);
      for (int r = 0; r < n; ++r)
        for (size_t i = 0; i < c; ++i) MP_CHECK(big.host[r * c + i] == value(r, i));
    }
    went(1, false);
    fill(big, me);
    big.upload(stream);
    MP_OK(bagua_scatter(big.dev, in_place && me == 1 ? big.dev + me * c : small.dev, c, BAGUA_INT64, 1, comm, stream));
    DevBuf& part = in_place && me == 1 ? big : small;
    fetch(part);
    for (size_t i = 0; i < c; ++i) MP_CHECK(part.host[(in_place && me == 1 ? me * c : 0) + i] == value(1, me * c + i));
    went(1, true);
  }
  // alltoall: block p of rank r's input goes to rank p.
  DevBuf in(all), out(all);
  fill(in, me);
  in.upload(stream);
  MP_OK(bagua_alltoall(in.dev, out.dev, c, BAGUA_INT64, comm, stream));
  fetch(out);
  for (int q = 0; q < n; ++q)
    for (size_t i = 0; i < c; ++i) MP_CHECK(out.host[q * c + i] == value(q, me * c + i));
  // alltoallv: rank q sends rank r count(q, r) elements; blocks are 5 elements apart on both sides.
  auto count = [c](int q, int r) { return c / 2 + 13 * q + 7 * r; };
  std::vector<size_t> sendcounts(n), sdispls(n), recvcounts(n), rdispls(n);
  size_t send_end = 0, recv_end = 0;
  for (int p = 0; p < n; ++p) {
    sendcounts[p] = count(me, p);
    recvcounts[p] = count(p, me);
    sdispls[p] = send_end;
    rdispls[p] = recv_end;
    send_end += sendcounts[p] + 5;
    recv_end += recvcounts[p] + 5;
  }
  DevBuf vin(send_end), vout(recv_end);
  fill(vin, me);
  vin.upload(stream);
  for (auto& v : vout.host) v = -1;
  vout.upload(stream);
  MP_OK(bagua_alltoallv(vin.dev, sendcounts.data(), sdispls.data(), vout.dev, recvcounts.data(), rdispls.data(),
                        BAGUA_INT64, comm, stream));
  // The call has returned: its counts are the caller's to reuse (the operation keeps a copy).
  const std::vector<size_t> want_counts = recvcounts, want_displs = rdispls;
  for (auto* array : {&sendcounts, &sdispls, &recvcounts, &rdispls}) std::fill(array->begin(), array->end(), 7);
  fetch(vout);
  for (int q = 0; q < n; ++q) {
    // Where rank q's block for this rank starts in q's input.
    size_t from = 0;
    for (int p = 0; p < me; ++p) from += count(q, p) + 5;
    for (size_t i = 0; i < want_counts[q]; ++i) MP_CHECK(vout.host[want_displs[q] + i] == value(q, from + i));
    for (size_t i = 0; i < 5; ++i) MP_CHECK(vout.host[want_displs[q] + want_counts[q] + i] == -1);
  }
  went(2, false);
}

// An in-place allreduce of each buffer, queued in turn on `stream` and `other` without a synchronize (buffer i holds
// value(rank, e) + i + salt), then both synchronized: every element exact.
void queued_allreduces(bagua_comm_t comm, void* stream, void* other, std::vector<std::unique_ptr<DevBuf>>& bufs,
                       int salt) {
  for (size_t i = 0; i < bufs.size(); ++i) {
    DevBuf& q = *bufs[i];
    void* on = i % 2 ? other : stream;
    for (size_t e = 0; e < q.host.size(); ++e) q.host[e] = value(g_rank, e) + static_cast<int64_t>(i) + salt;
    q.upload(on);
    MP_OK(bagua_allreduce(q.dev, q.dev, q.host.size(), BAGUA_INT64, BAGUA_SUM, comm, on));
    q.download(on);
  }
  sync(stream);
  sync(other);
  for (size_t i = 0; i < bufs.size(); ++i)
    for (size_t e = 0; e < bufs[i]->host.size(); ++e)
      MP_CHECK(bufs[i]->host[e] == value_sum(e) + (static_cast<int64_t>(i) + salt) * g_size);
}

// `calls` exact allreduces of `count` elements where the last rank's buffer is memory that peers cannot map (as
// cudaMallocAsync's; tests/cuda has the real one). False without the stand-in, which makes such memory.
bool unmappable_allreduces(bagua_comm_t comm, void* stream, size_t count, int calls) {
  StandinControl* standin = standin_control();
  if (standin == nullptr) return false;
  DevBuf c(count);
  int64_t* unmappable = nullptr;
  if (g_rank == g_size - 1) {
    unmappable = static_cast<int64_t*>(standin->alloc_unexportable(count * sizeof(int64_t)));
    MP_CHECK(unmappable != nullptr);
    std::swap(c.dev, unmappable);
  }
  for (int i = 0; i < calls; ++i) exact_allreduce(comm, stream, c, nullptr, 4 + i);
  if (unmappable) std::swap(c.dev, unmappable);
  g_rt->free_device(unmappable);
  return true;
}

// rank1_cannot_map: rank 1 cannot open IPC handles (it votes no only where it must map a peer's buffer).
int ipc(bagua_comm_t comm, bool expect_staged, bool rank1_cannot_map) {
  void* stream = g_rt->create_stream(0);
  const size_t count = 100003;  // 800 KB: the direct algorithm's range on one host; blocks of uneven size
  DevBuf a(count), b(count);
  // Each call went the expected way: `calls` more through IPC, or staged.
  uint64_t ipc_before = through_ipc(comm), staged_before = staged(comm);
  auto went = [&](uint64_t calls, bool ipc_way) {
    MP_CHECK(through_ipc(comm) == ipc_before + (ipc_way ? calls : 0));
    MP_CHECK(staged(comm) == staged_before + (ipc_way ? 0 : calls));
    ipc_before = through_ipc(comm);
    staged_before = staged(comm);
  };
  const uint64_t before = ipc_opened(comm);
  exact_allreduce(comm, stream, a, nullptr, 1);
  went(1, !expect_staged);
  const uint64_t first = ipc_opened(comm);
  if (!expect_staged) {
    MP_CHECK(first > before);
    exact_allreduce(comm, stream, a, nullptr, 2);  // the same buffer: mapped already
    MP_CHECK(ipc_opened(comm) == first);
    went(1, true);
  }
  exact_allreduce(comm, stream, a, &b, 3);
  went(1, !expect_staged);
  // Calls through IPC take no staging memory (it is leased only when the ranks stage).
  const size_t pool = comm->impl->device_proxy().pool_bytes();
  MP_CHECK(expect_staged ? pool > 0 : pool == 0);
  // One rank on memory that peers cannot map (as cudaMallocAsync's; tests/cuda has the real one): every rank
  // stages, still exact.
  if (unmappable_allreduces(comm, stream, count, 1)) went(1, false);
  every_collective(comm, stream, [&](uint64_t calls, bool rank1_maps_nothing) {
    sync(stream);  // (a rank that gets no output has not fetched it)
    went(calls, !expect_staged || (rank1_cannot_map && rank1_maps_nothing));
  });
  // Calls queued on two streams without a synchronize, more than BAGUA_DEVICE_MEMORY_LIMIT holds when they stage
  // (mp_device_ipc_gpus_2 runs with 8 MiB): later calls wait at the call for room, granted in call order on every
  // rank, and all are exact.
  void* other = g_rt->create_stream(0);
  std::vector<std::unique_ptr<DevBuf>> queued;
  for (int i = 0; i < 12; ++i) queued.push_back(std::make_unique<DevBuf>(count));
  queued_allreduces(comm, stream, other, queued, 0);
  went(12, !expect_staged);
  g_rt->destroy_stream(other);
  // More buffers than the cache holds, in turn: each is mapped again after its eviction.
  std::vector<std::unique_ptr<DevBuf>> many;
  for (int i = 0; i < 4; ++i) many.push_back(std::make_unique<DevBuf>(count));
  const uint64_t start = ipc_opened(comm);
  for (int pass = 0; pass < 2; ++pass)
    for (int i = 0; i < 4; ++i) exact_allreduce(comm, stream, *many[i], nullptr, 5 + i);
  went(8, !expect_staged);
  if (!expect_staged) MP_CHECK(ipc_opened(comm) - start >= 8);
  // Staging leased after submission (when the ranks stage) is counted back exactly (the proxy counts it back just
  // after releasing the stream: wait a little).
  for (int i = 0; i < 1000 && comm->impl->device_proxy().submitted_bytes() != 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  MP_CHECK(comm->impl->device_proxy().submitted_bytes() == 0);
  if (g_rank == 0)
    std::printf(
        "ipc on %d ranks: exact; %s\n", g_size,
        expect_staged ? "every call staged" : "through IPC, peers mapped once per buffer, again after eviction");
  g_rt->destroy_stream(stream);
  return 0;
}

uint64_t caller_opened(bagua_comm_t comm) { return comm->impl->device_proxy().caller_mappings().opened(); }

// The IPC path on the caller's stream (BAGUA_DEVICE_DATA_PATH=stream; docs/cuda.md): a call on buffers that a peer
// process has not mapped yet is staged, and has this process's next device call map them on its own thread; the same
// buffers again go through IPC. The proxy thread opens nothing. Oracle: exact int64 sums, every element, every call.
int ipc_stream(bagua_comm_t comm) {
  void* stream = g_rt->create_stream(0);
  const size_t count = 100003;  // 800 KB: the direct algorithm's range on one host; blocks of uneven size
  DevBuf a(count), b(count);
  uint64_t ipc_before = through_ipc(comm), staged_before = staged(comm);
  auto went = [&](uint64_t ipc_calls, uint64_t staged_calls) {
    MP_CHECK(through_ipc(comm) - ipc_before == ipc_calls);
    MP_CHECK(staged(comm) - staged_before == staged_calls);
    ipc_before = through_ipc(comm);
    staged_before = staged(comm);
  };
  exact_allreduce(comm, stream, a, nullptr, 1);  // a is new to the peers
  went(0, 1);
  exact_allreduce(comm, stream, a, nullptr, 2);
  went(1, 0);
  exact_allreduce(comm, stream, a, &b, 3);  // b is
  went(0, 1);
  exact_allreduce(comm, stream, a, &b, 4);
  went(1, 0);
  MP_CHECK(ipc_opened(comm) == 0);
  MP_CHECK(caller_opened(comm) == 2 * static_cast<uint64_t>(g_size - 1));  // each peer's a and b
  // One rank on memory that peers cannot map: every rank stages, every time.
  if (unmappable_allreduces(comm, stream, count, 2)) went(0, 2);
  // The other collectives, twice on the same buffers: the second time through IPC.
  const size_t c = 70000;  // per block: 560 KB (the model takes peer_memory from 1 MiB in all)
  const int n = g_size, me = g_rank;
  DevBuf big(c * n), small(c);
  auto fetch = [&](DevBuf& d) {
    d.download(stream);
    sync(stream);
  };
  auto fill = [](DevBuf& d, int r) {
    for (size_t i = 0; i < d.host.size(); ++i) d.host[i] = value(r, i);
  };
  for (int rep = 0; rep < 2; ++rep) {
    fill(small, me);
    small.upload(stream);
    MP_OK(bagua_allgather(small.dev, big.dev, c, BAGUA_INT64, comm, stream));
    fetch(big);
    for (int r = 0; r < n; ++r)
      for (size_t i = 0; i < c; ++i) MP_CHECK(big.host[r * c + i] == value(r, i));
    fill(big, me);
    big.upload(stream);
    MP_OK(bagua_reduce_scatter(big.dev, small.dev, c, BAGUA_INT64, BAGUA_SUM, comm, stream));
    fetch(small);
    for (size_t i = 0; i < c; ++i) MP_CHECK(small.host[i] == value_sum(me * c + i));
    fill(small, me);
    small.upload(stream);
    MP_OK(bagua_broadcast(small.dev, small.dev, c, BAGUA_INT64, 1, comm, stream));
    fetch(small);
    for (size_t i = 0; i < c; ++i) MP_CHECK(small.host[i] == value(1, i));
    fill(small, me);
    small.upload(stream);
    MP_OK(bagua_reduce(small.dev, small.dev, c, BAGUA_INT64, BAGUA_SUM, n - 1, comm, stream));
    fetch(small);
    if (me == n - 1)
      for (size_t i = 0; i < c; ++i) MP_CHECK(small.host[i] == value_sum(i));
    fill(small, me);
    small.upload(stream);
    MP_OK(bagua_gather(small.dev, big.dev, c, BAGUA_INT64, 0, comm, stream));
    fetch(big);
    if (me == 0)
      for (int r = 0; r < n; ++r)
        for (size_t i = 0; i < c; ++i) MP_CHECK(big.host[r * c + i] == value(r, i));
    fill(big, me);
    big.upload(stream);
    MP_OK(bagua_scatter(big.dev, small.dev, c, BAGUA_INT64, 1, comm, stream));
    fetch(small);
    for (size_t i = 0; i < c; ++i) MP_CHECK(small.host[i] == value(1, me * c + i));
    if (rep == 0)
      went(through_ipc(comm) - ipc_before, staged(comm) - staged_before);  // (big and small were new)
    else
      went(6, 0);
  }
  // Queued on two streams without a synchronize: exact however they went; then the same buffers again, through IPC.
  void* other = g_rt->create_stream(0);
  std::vector<std::unique_ptr<DevBuf>> queued;
  for (int i = 0; i < 12; ++i) queued.push_back(std::make_unique<DevBuf>(count));
  for (int pass = 0; pass < 2; ++pass) {
    queued_allreduces(comm, stream, other, queued, pass);
    if (pass == 0)
      went(through_ipc(comm) - ipc_before, 12 - (through_ipc(comm) - ipc_before));
    else
      went(12, 0);
  }
  g_rt->destroy_stream(other);
  MP_CHECK(ipc_opened(comm) == 0);
  // A group on one communicator: its calls go on the caller's stream in call order, through IPC on buffers mapped
  // before (a, small, big), exact.
  fill(a, me);
  a.upload(stream);
  fill(small, me);
  small.upload(stream);
  MP_OK(bagua_group_start());
  MP_OK(bagua_allreduce(a.dev, a.dev, count, BAGUA_INT64, BAGUA_SUM, comm, stream));
  MP_OK(bagua_allgather(small.dev, big.dev, c, BAGUA_INT64, comm, stream));
  MP_OK(bagua_group_end());
  fetch(a);
  fetch(big);
  for (size_t i = 0; i < count; ++i) MP_CHECK(a.host[i] == value_sum(i));
  for (int r = 0; r < n; ++r)
    for (size_t i = 0; i < c; ++i) MP_CHECK(big.host[r * c + i] == value(r, i));
  went(2, 0);
  // A group over two communicators, in opposite orders on odd and even ranks: every call stages (on the caller's
  // stream each would hold its stream until its peers reach it, and the orders differ), with no deadlock; exact.
  bagua_comm_t twin = nullptr;
  MP_OK(bagua_comm_split(comm, 0, me, &twin));
  fill(a, me);
  a.upload(stream);
  fill(b, me);
  b.upload(stream);
  MP_OK(bagua_group_start());
  for (int k = 0; k < 2; ++k) {
    const bool first_comm = (k == 0) == (me % 2 == 0);
    DevBuf& buf = first_comm ? a : b;
    MP_OK(bagua_allreduce(buf.dev, buf.dev, count, BAGUA_INT64, BAGUA_SUM, first_comm ? comm : twin, stream));
  }
  MP_OK(bagua_group_end());
  fetch(a);
  fetch(b);
  for (size_t i = 0; i < count; ++i) MP_CHECK(a.host[i] == value_sum(i) && b.host[i] == value_sum(i));
  went(0, 0);
  MP_OK(bagua_comm_destroy(twin));
  // A group with a call that cannot go on the caller's stream (alltoall) stages every call, which then start
  // together; here against ranks that make the same calls outside a group (even ranks group them, odd ones do not):
  // the allreduce stages on every rank (a peer's form is the host algorithm's), no deadlock, exact.
  fill(a, me);
  a.upload(stream);
  fill(big, me);
  big.upload(stream);
  DevBuf shuffled(c * n);
  const bool grouped = me % 2 == 0;
  if (grouped) MP_OK(bagua_group_start());
  MP_OK(bagua_alltoall(big.dev, shuffled.dev, c, BAGUA_INT64, comm, stream));
  MP_OK(bagua_allreduce(a.dev, a.dev, count, BAGUA_INT64, BAGUA_SUM, comm, stream));
  if (grouped) MP_OK(bagua_group_end());
  fetch(a);
  fetch(shuffled);
  for (size_t i = 0; i < count; ++i) MP_CHECK(a.host[i] == value_sum(i));
  for (int r = 0; r < n; ++r)
    for (size_t i = 0; i < c; ++i) MP_CHECK(shuffled.host[r * c + i] == value(r, me * c + i));
  went(0, grouped ? 0 : 1);
  MP_CHECK(ipc_opened(comm) == 0);
  if (g_rank == 0)
    std::printf("ipc on the caller's stream, %d ranks: new buffers staged, then through IPC; exact\n", g_size);
  g_rt->destroy_stream(stream);
  return 0;
}

// Run with BAGUA_IPC_CACHE_ENTRIES=2 on 2 ranks: buffers x, y, z, x, each called twice in place (one mapping of
// the peer's each). A buffer's first call is staged, its second through IPC; opening z lets x go and opening x again
// lets y go, each closed by the calling thread at once (nothing is parked). Oracle: exact sums, counts.
int ipc_stream_evict(bagua_comm_t comm) {
  void* stream = g_rt->create_stream(0);
  const size_t count = 100003;
  DevBuf x(count), y(count), z(count);
  uint64_t ipc_before = through_ipc(comm), staged_before = staged(comm);
  for (DevBuf* b : {&x, &y, &z, &x})
    for (int call = 0; call < 2; ++call) {
      exact_allreduce(comm, stream, *b, nullptr, call);
      MP_CHECK(through_ipc(comm) - ipc_before == static_cast<uint64_t>(call));
      MP_CHECK(staged(comm) - staged_before == static_cast<uint64_t>(1 - call));
      ipc_before = through_ipc(comm);
      staged_before = staged(comm);
      MP_CHECK(comm->impl->device_proxy().caller_mappings().pending_closes() == 0);
    }
  MP_CHECK(caller_opened(comm) == 4);
  if (g_rank == 0) std::printf("ipc on the caller's stream: evicted mappings closed, mapped again, exact\n");
  g_rt->destroy_stream(stream);
  return 0;
}

// Two ranks as threads of this process.
int threads() {
  bagua_unique_id_t id;
  MP_OK(bagua_get_unique_id(&id));
  std::atomic<int> step{0};
  std::atomic<bool> refused{false};
  auto rank_main = [&](int r) {
    bagua_comm_t comm = nullptr;
    MP_OK(bagua_comm_init_rank(&comm, 2, id, r));
    DevBuf b(1000);
    for (auto& v : b.host) v = r + 1;
    void* own = g_rt->create_stream(0);
    b.upload(own);
    sync(own);
    if (r == 0) {
      // In flight on the legacy default stream until rank 1 joins.
      MP_OK(bagua_allreduce(b.dev, b.dev, b.host.size(), BAGUA_INT64, BAGUA_SUM, comm, nullptr));
      step = 1;
      b.download(nullptr);
      sync(nullptr);
    } else {
      while (step.load() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      bagua_status_t s = bagua_allreduce(b.dev, b.dev, b.host.size(), BAGUA_INT64, BAGUA_SUM, comm, nullptr);
      refused = s == BAGUA_ERR_INVALID_USAGE && std::strstr(bagua_get_last_error(comm), "stream each") != nullptr;
      MP_OK(bagua_allreduce(b.dev, b.dev, b.host.size(), BAGUA_INT64, BAGUA_SUM, comm, own));
      b.download(own);
      sync(own);
    }
    for (int64_t v : b.host) MP_CHECK(v == 3);
    // Large enough for the direct algorithm: peers of one process use each other's pointers, nothing is mapped.
    DevBuf big(100003);
    for (auto& v : big.host) v = r + 1;
    big.upload(own);
    MP_OK(bagua_allreduce(big.dev, big.dev, big.host.size(), BAGUA_INT64, BAGUA_SUM, comm, own));
    big.download(own);
    sync(own);
    for (int64_t v : big.host) MP_CHECK(v == 3);
    MP_CHECK(comm->impl->device_proxy().ipc_cache().opened() == 0);
    MP_CHECK(comm->impl->device_proxy().caller_mappings().opened() == 0);
    MP_CHECK(comm->impl->device_proxy().in_host_through_ipc() == 1);  // (either path: the same GPU)
    MP_OK(bagua_comm_destroy(comm));
  };
  std::thread t0(rank_main, 0), t1(rank_main, 1);
  t0.join();
  t1.join();
  MP_CHECK(refused.load());
  std::printf("threads: a shared stream is refused, a stream each works\n");
  return 0;
}

int capture() {
  StandinControl* standin = standin_control();
  if (standin == nullptr) {
    std::printf("skipping: graph capture is checked with the stand-in here, and by tests/cuda on a GPU\n");
    return 77;
  }
  bagua_unique_id_t id;
  MP_OK(bagua_get_unique_id(&id));
  bagua_comm_t comm = nullptr;
  MP_OK(bagua_comm_init_rank(&comm, 1, id, 0));
  void* stream = g_rt->create_stream(0);
  DevBuf b(10);
  standin->set_capturing(stream, true);
  MP_CHECK(bagua_allreduce(b.dev, b.dev, 10, BAGUA_INT64, BAGUA_SUM, comm, stream) == BAGUA_ERR_NOT_SUPPORTED);
  MP_CHECK(std::strstr(bagua_get_last_error(comm), "CUDA graph") != nullptr);
  standin->set_capturing(stream, false);
  for (auto& v : b.host) v = 5;
  b.upload(stream);
  MP_OK(bagua_allreduce(b.dev, b.dev, 10, BAGUA_INT64, BAGUA_SUM, comm, stream));
  b.download(stream);
  sync(stream);
  for (int64_t v : b.host) MP_CHECK(v == 5);
  MP_OK(bagua_comm_destroy(comm));
  std::printf("capture: refused with no side effect\n");
  return 0;
}

}  // namespace

// The same calls on host and on device memory, byte for byte. Inputs: a different scale per rank and region.
std::vector<uint8_t> relaxation_input(size_t count, bagua_datatype_t dtype, int step) {
  std::vector<float> x(count);
  for (size_t i = 0; i < count; ++i)
    x[i] = static_cast<float>(static_cast<long long>((i * 7 + g_rank * 13 + step * 5) % 97) - 48) / 16.0f *
           static_cast<float>(1 + (i / 700 + g_rank) % 3);
  std::vector<uint8_t> out(count * (dtype == BAGUA_FLOAT32 ? 4 : 2));
  if (dtype == BAGUA_FLOAT32) {
    std::memcpy(out.data(), x.data(), out.size());
  } else if (dtype == BAGUA_FLOAT16) {  // every value above is exact in fp16: sixteenths of integers below 2^11
    for (size_t i = 0; i < count; ++i) {
      _Float16 h = static_cast<_Float16>(x[i]);
      std::memcpy(out.data() + 2 * i, &h, 2);
    }
  } else {  // and in bf16: at most 144 sixteenths, 8 significant bits
    for (size_t i = 0; i < count; ++i) {
      uint32_t bits;
      std::memcpy(&bits, &x[i], 4);
      uint16_t b = static_cast<uint16_t>(bits >> 16);
      std::memcpy(out.data() + 2 * i, &b, 2);
    }
  }
  return out;
}

// Every wire format of the quantized allreduce on device memory against the same calls on host memory, byte for
// byte, residuals included: the oracle is the host path, whose CPU kernels the device kernels must match bit for
// bit (kernels/quantize.h). Each case runs 3 steps on a device state: device, host (odd ranks; even ranks stay on
// device memory, so ranks mix memory kinds in that call), device memory (the error feedback moves between device
// and host memory), against a host state that runs all 3 on host memory. The
// hierarchical mode is OFF, ON or AUTO by case, so every form that the layout has runs (flat; rail, or one host
// with ON; leader with hosts of different sizes); each device call compresses on the device: counted.
int quantized_formats(bagua_comm_t comm, void* stream) {
  struct Format {
    const char* name;
    bagua_compress_kind_t kind;
    int bits, stochastic;
  };
  const Format formats[] = {{"minmax8", BAGUA_COMPRESS_MINMAX, 8, 0},
                            {"minmax4", BAGUA_COMPRESS_MINMAX, 4, 0},
                            {"minmax2", BAGUA_COMPRESS_MINMAX, 2, 0},
                            {"minmax1", BAGUA_COMPRESS_MINMAX, 1, 0},
                            {"minmax4-stochastic", BAGUA_COMPRESS_MINMAX, 4, 1},
                            {"sign", BAGUA_COMPRESS_SIGN, 8, 0},
                            {"fp16", BAGUA_COMPRESS_FP16, 8, 0},
                            {"bf16", BAGUA_COMPRESS_BF16, 8, 0}};
  const size_t count = 20011;  // blocks not a multiple of the chunk
  int index = 0;
  for (const Format& f : formats) {
    for (bagua_datatype_t dtype : {BAGUA_FLOAT32, BAGUA_FLOAT16, BAGUA_BFLOAT16}) {
      ++index;
      const bool in_place = index % 2 == 0, flat = index % 3 != 0, feedback = index % 4 != 1;
      const bagua_redop_t op = index % 5 == 0 ? BAGUA_SUM : BAGUA_AVG;
      bagua_compression_t cfg = BAGUA_COMPRESSION_INITIALIZER;
      cfg.kind = f.kind;
      cfg.bits = f.bits;
      cfg.stochastic = f.stochastic;
      cfg.seed = 7;
      cfg.chunk = 256;
      cfg.error_feedback = feedback ? 1 : 0;
      cfg.hierarchical =
          flat ? BAGUA_HIERARCHICAL_OFF : (index % 2 == 0 ? BAGUA_HIERARCHICAL_ON : BAGUA_HIERARCHICAL_AUTO);
      bagua_qstate_t host_state = nullptr, dev_state = nullptr;
      MP_OK(bagua_qstate_create(comm, count, dtype, &cfg, &host_state));
      MP_OK(bagua_qstate_create(comm, count, dtype, &cfg, &dev_state));
      // Without error feedback a nearest-rounding case runs stateless (a stochastic one needs the state's step).
      bagua_qstate_t host_call_state = host_state, dev_call_state = dev_state;
      if (!feedback && !f.stochastic) host_call_state = dev_call_state = nullptr;
      const size_t bytes = count * (dtype == BAGUA_FLOAT32 ? 4 : 2);
      void* din = g_rt->alloc_device(bytes, 0);
      void* dout = in_place ? din : g_rt->alloc_device(bytes, 0);
      const uint64_t on_device_before = comm->impl->device_proxy().compressed_on_device();
      for (int step = 0; step < 3; ++step) {
        std::vector<uint8_t> in = relaxation_input(count, dtype, step), out(bytes), host_in = in, host_out(bytes);
        MP_OK(bagua_quantized_allreduce(host_in.data(), in_place ? host_in.data() : host_out.data(), count, dtype, op,
                                        &cfg, host_call_state, comm, nullptr));
        if (in_place) host_out = host_in;
        if (step == 1 && g_rank % 2 == 1) {  // odd ranks' device state on host memory: mixed ranks
          MP_OK(bagua_quantized_allreduce(in.data(), in_place ? in.data() : out.data(), count, dtype, op, &cfg,
                                          dev_call_state, comm, nullptr));
          if (in_place) out = in;
        } else {
          g_rt->copy_async(din, in.data(), bytes, stream);
          MP_OK(bagua_quantized_allreduce(din, dout, count, dtype, op, &cfg, dev_call_state, comm, stream));
          g_rt->copy_async(out.data(), dout, bytes, stream);
          sync(stream);
        }
        if (out != host_out) {
          std::fprintf(stderr, "rank %d: quantized %s, data type %d, %s, step %d: device state differs from host\n",
                       g_rank, f.name, static_cast<int>(dtype), in_place ? "in place" : "out of place", step);
          return 1;
        }
        std::vector<float> rh(count), rd(count);
        MP_OK(bagua_qstate_residual(host_state, rh.data(), count));
        MP_OK(bagua_qstate_residual(dev_state, rd.data(), count));
        if (std::memcmp(rh.data(), rd.data(), count * 4) != 0) {
          std::fprintf(stderr, "rank %d: quantized %s step %d: residuals differ\n", g_rank, f.name, step);
          return 1;
        }
      }
      const uint64_t on_device = comm->impl->device_proxy().compressed_on_device() - on_device_before;
      // On the caller's stream only the flat form compresses on the device.
      const bool on_device_form =
          proxy_path(comm) || compresses_on_caller_stream(*comm->impl, Codec::from_config(&cfg), nullptr);
      const uint64_t device_calls = !on_device_form ? 0 : g_rank % 2 == 1 ? 2 : 3;
      if (on_device != device_calls) {
        std::fprintf(stderr, "rank %d: quantized %s: %llu of %llu device calls compressed on the device\n", g_rank,
                     f.name, static_cast<unsigned long long>(on_device), static_cast<unsigned long long>(device_calls));
        return 1;
      }
      MP_OK(bagua_qstate_destroy(host_state));
      MP_OK(bagua_qstate_destroy(dev_state));
      g_rt->free_device(din);
      if (!in_place) g_rt->free_device(dout);
    }
  }
  if (g_rank == 0) std::printf("quantized allreduce: %d format x data type cases on device memory equal host\n", index);
  return 0;
}

// On the caller's stream a state's calls that compress on the device keep its error feedback in device memory,
// ordered by that stream. While one is queued, a call on another stream and a request (which compresses on the host)
// are refused, with no side effect; once the stream is synchronized, both run, and the request moves the error
// feedback back to host memory. In a group the call is staged (its gates would order the group's calls behind each
// other's rounds). Oracle: the same four calls on a host state, byte for byte, residual included.
int quantized_state_rules(bagua_comm_t comm, void* stream) {
  StandinControl* standin = standin_control();
  if (proxy_path(comm) || standin == nullptr) return 0;
  const size_t count = 30000, bytes = count * 4;
  FlatStates states(comm, count);
  const bagua_compression_t cfg = states.cfg;
  bagua_qstate_t host_state = states.host, dev_state = states.dev;
  void* other = g_rt->create_stream(0);
  void* dev = g_rt->alloc_device(bytes, 0);
  DeviceProxy& proxy = comm->impl->device_proxy();
  const uint64_t on_device_before = proxy.compressed_on_device();
  bagua_stats_t stats_before{};
  stats_before.size = sizeof stats_before;
  MP_OK(bagua_comm_get_stats(comm, &stats_before));
  for (int step = 0; step < 4; ++step) {
    std::vector<uint8_t> want = relaxation_input(count, BAGUA_FLOAT32, step), in = want, got(bytes);
    MP_OK(bagua_quantized_allreduce(want.data(), want.data(), count, BAGUA_FLOAT32, BAGUA_SUM, &cfg, host_state, comm,
                                    nullptr));
    if (step == 0) {  // held behind 300 ms of stream work, so that the call is still queued below
      standin->run_on_stream(stream, [] { std::this_thread::sleep_for(std::chrono::milliseconds(300)); });
      g_rt->copy_async(dev, in.data(), bytes, stream);
      MP_OK(bagua_quantized_allreduce(dev, dev, count, BAGUA_FLOAT32, BAGUA_SUM, &cfg, dev_state, comm, stream));
      MP_CHECK(bagua_quantized_allreduce(dev, dev, count, BAGUA_FLOAT32, BAGUA_SUM, &cfg, dev_state, comm, other) ==
               BAGUA_ERR_INVALID_USAGE);
      MP_CHECK(std::strstr(bagua_get_last_error(comm), "another stream") != nullptr);
      bagua_request_t req = nullptr;
      MP_CHECK(bagua_iquantized_allreduce(dev, dev, count, BAGUA_FLOAT32, BAGUA_SUM, &cfg, dev_state, comm, &req) ==
               BAGUA_ERR_INVALID_USAGE);
      MP_CHECK(std::strstr(bagua_get_last_error(comm), "synchronize that stream") != nullptr && req == nullptr);
      g_rt->copy_async(got.data(), dev, bytes, stream);
      sync(stream);
    } else if (step == 1) {  // a request: staged, compressed on the host
      g_rt->copy_async(dev, in.data(), bytes, stream);
      sync(stream);
      bagua_request_t req = nullptr;
      MP_OK(bagua_iquantized_allreduce(dev, dev, count, BAGUA_FLOAT32, BAGUA_SUM, &cfg, dev_state, comm, &req));
      MP_OK(bagua_wait(req));
      g_rt->copy_async(got.data(), dev, bytes, stream);
      sync(stream);
    } else if (step == 2) {  // the other stream, now that nothing is queued
      g_rt->copy_async(dev, in.data(), bytes, other);
      MP_OK(bagua_quantized_allreduce(dev, dev, count, BAGUA_FLOAT32, BAGUA_SUM, &cfg, dev_state, comm, other));
      g_rt->copy_async(got.data(), dev, bytes, other);
      sync(other);
    } else {  // in a group with an allreduce on the same stream
      DevBuf b(1000);
      for (auto& v : b.host) v = g_rank + 1;
      b.upload(other);
      g_rt->copy_async(dev, in.data(), bytes, other);
      MP_OK(bagua_group_start());
      MP_OK(bagua_quantized_allreduce(dev, dev, count, BAGUA_FLOAT32, BAGUA_SUM, &cfg, dev_state, comm, other));
      MP_OK(bagua_allreduce(b.dev, b.dev, b.host.size(), BAGUA_INT64, BAGUA_SUM, comm, other));
      MP_OK(bagua_group_end());
      g_rt->copy_async(got.data(), dev, bytes, other);
      b.download(other);
      sync(other);
      for (int64_t v : b.host) MP_CHECK(v == rank_sum() + g_size);
    }
    if (got != want) {
      std::fprintf(stderr, "rank %d: state rules, step %d: device differs from host\n", g_rank, step);
      return 1;
    }
  }
  MP_CHECK(proxy.compressed_on_device() == on_device_before + 2);  // (not the request, nor the call in a group)
  // BAGUA_DEVICE_TIMING=1: the phases' time on the device's clock, counted by the time the streams are synchronized
  // (get_stats settles the calls that have ended on their streams).
  if (comm->impl->config().device_timing) {
    bagua_stats_t stats{};
    stats.size = sizeof stats;
    MP_OK(bagua_comm_get_stats(comm, &stats));
    MP_CHECK(stats.compute_ns > stats_before.compute_ns);
  }
  std::vector<float> rh(count), rd(count);
  MP_OK(bagua_qstate_residual(host_state, rh.data(), count));
  MP_OK(bagua_qstate_residual(dev_state, rd.data(), count));
  MP_CHECK(std::memcmp(rh.data(), rd.data(), bytes) == 0);
  // The residual written into device memory: the same bits.
  std::fill(rd.begin(), rd.end(), -1.0f);
  void* residual = g_rt->alloc_device(bytes, 0);
  MP_OK(bagua_qstate_residual(dev_state, static_cast<float*>(residual), count));
  g_rt->copy_async(rd.data(), residual, bytes, nullptr);
  sync(nullptr);
  g_rt->free_device(residual);
  MP_CHECK(std::memcmp(rh.data(), rd.data(), bytes) == 0);
  g_rt->free_device(dev);
  g_rt->destroy_stream(other);
  return 0;
}

int relaxations(bagua_comm_t comm) {
  void* stream = g_rt->create_stream(0);
  const size_t count = 50000;
  for (bagua_datatype_t dtype : {BAGUA_FLOAT32, BAGUA_FLOAT16}) {
    for (bool in_place : {true, false}) {
      bagua_compression_t cfg = BAGUA_COMPRESSION_INITIALIZER;
      cfg.error_feedback = 1;
      cfg.chunk = 512;
      bagua_qstate_t host_state, dev_state;
      MP_OK(bagua_qstate_create(comm, count, dtype, &cfg, &host_state));
      MP_OK(bagua_qstate_create(comm, count, dtype, &cfg, &dev_state));
      const size_t bytes = count * (dtype == BAGUA_FLOAT16 ? 2 : 4);
      const int steps = 3;
      std::vector<std::vector<uint8_t>> host_out;
      for (int step = 0; step < steps; ++step) {
        std::vector<uint8_t> in = relaxation_input(count, dtype, step), out(bytes);
        MP_OK(bagua_quantized_allreduce(in.data(), in_place ? in.data() : out.data(), count, dtype, BAGUA_AVG, &cfg,
                                        host_state, comm, nullptr));
        host_out.push_back(in_place ? in : out);
      }
      // Device: all steps queued on one stream, no synchronize in between.
      std::vector<void*> din(steps), dout(steps);
      std::vector<std::vector<uint8_t>> inputs(steps), got(steps, std::vector<uint8_t>(bytes));
      for (int step = 0; step < steps; ++step) {
        inputs[step] = relaxation_input(count, dtype, step);
        din[step] = g_rt->alloc_device(bytes, 0);
        dout[step] = in_place ? din[step] : g_rt->alloc_device(bytes, 0);
        g_rt->copy_async(din[step], inputs[step].data(), bytes, stream);
        MP_OK(bagua_quantized_allreduce(din[step], dout[step], count, dtype, BAGUA_AVG, &cfg, dev_state, comm, stream));
        g_rt->copy_async(got[step].data(), dout[step], bytes, stream);
      }
      sync(stream);
      for (int step = 0; step < steps; ++step) {
        if (got[step] != host_out[step]) {
          std::fprintf(stderr, "rank %d: quantized %s %s step %d: device differs from host\n", g_rank,
                       dtype == BAGUA_FLOAT32 ? "fp32" : "fp16", in_place ? "in place" : "out of place", step);
          return 1;
        }
        g_rt->free_device(din[step]);
        if (!in_place) g_rt->free_device(dout[step]);
      }
      std::vector<float> rh(count), rd(count);
      MP_OK(bagua_qstate_residual(host_state, rh.data(), count));
      MP_OK(bagua_qstate_residual(dev_state, rd.data(), count));
      for (size_t i = 0; i < count; ++i)
        if (rh[i] != rd[i]) {
          std::fprintf(stderr, "rank %d: residual [%zu] host %g device %g\n", g_rank, i, rh[i], rd[i]);
          return 1;
        }
      MP_OK(bagua_qstate_destroy(host_state));
      MP_OK(bagua_qstate_destroy(dev_state));
    }
  }
  if (quantized_formats(comm, stream) != 0) return 1;
  if (quantized_state_rules(comm, stream) != 0) return 1;
  // A state with a call still queued is not freed (the stand-in holds the stream so the call cannot have run).
  if (StandinControl* standin = standin_control()) {
    bagua_compression_t cfg = BAGUA_COMPRESSION_INITIALIZER;
    bagua_qstate_t state;
    MP_OK(bagua_qstate_create(comm, count, BAGUA_FLOAT32, &cfg, &state));
    void* buf = g_rt->alloc_device(count * 4, 0);
    standin->run_on_stream(stream, [] { std::this_thread::sleep_for(std::chrono::milliseconds(300)); });
    MP_OK(bagua_quantized_allreduce(buf, buf, count, BAGUA_FLOAT32, BAGUA_SUM, &cfg, state, comm, stream));
    MP_CHECK(bagua_qstate_destroy(state) == BAGUA_ERR_INVALID_USAGE);
    sync(stream);
    MP_OK(bagua_barrier(comm, nullptr));  // (every rank's call has completed: its operation is freed)
    auto deadline = Clock::now() + std::chrono::seconds(10);
    bagua_status_t st;
    while ((st = bagua_qstate_destroy(state)) != BAGUA_SUCCESS && Clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    MP_CHECK(st == BAGUA_SUCCESS);
    g_rt->free_device(buf);
  }
  // Gossip, fp32 and fp64, ring.
  bagua_topology_t topo;
  MP_OK(bagua_topology_create(comm, BAGUA_TOPO_RING, &topo));
  for (bagua_datatype_t dtype : {BAGUA_FLOAT32, BAGUA_FLOAT64}) {
    const size_t elem = dtype == BAGUA_FLOAT64 ? 8 : 4, bytes = count * elem;
    std::vector<uint8_t> host(bytes), got(bytes);
    for (size_t i = 0; i < count; ++i) {
      double v = static_cast<double>((i * 3 + g_rank * 17) % 101) / 8;
      if (dtype == BAGUA_FLOAT64)
        std::memcpy(host.data() + 8 * i, &v, 8);
      else {
        float f = static_cast<float>(v);
        std::memcpy(host.data() + 4 * i, &f, 4);
      }
    }
    void* dev = g_rt->alloc_device(bytes, 0);
    g_rt->copy_async(dev, host.data(), bytes, stream);
    sync(stream);  // (the host calls below change `host` in place)
    for (uint64_t step = 0; step < 2; ++step) {
      MP_OK(bagua_neighbor_allreduce(host.data(), host.data(), count, dtype, topo, step, comm, nullptr));
      MP_OK(bagua_neighbor_allreduce(dev, dev, count, dtype, topo, step, comm, stream));
    }
    g_rt->copy_async(got.data(), dev, bytes, stream);
    sync(stream);
    MP_CHECK(got == host);
    g_rt->free_device(dev);
  }
  MP_OK(bagua_topology_destroy(topo));
  // Low-precision decentralized SGD: weights, replicas and steps on device memory equal those on host memory, for
  // every format (error feedback on for min-max): the replicas stay on the device (stepped by kernels); step 2
  // passes a host x to the device object; replicas are read into device and host memory.
  for (bagua_compress_kind_t kind :
       {BAGUA_COMPRESS_MINMAX, BAGUA_COMPRESS_SIGN, BAGUA_COMPRESS_FP16, BAGUA_COMPRESS_BF16}) {
    const size_t n = 20000;
    std::vector<float> w(n), got(n), replica_host(n), replica_dev(n);
    for (size_t i = 0; i < n; ++i)
      w[i] = static_cast<float>(static_cast<long long>((i * 11 + g_rank * 7) % 64) - 32) / 8;
    void* dw = g_rt->alloc_device(n * 4, 0);
    void* dreplica = g_rt->alloc_device(n * 4, 0);
    g_rt->copy_async(dw, w.data(), n * 4, nullptr);
    sync(nullptr);
    bagua_compression_t cfg = BAGUA_COMPRESSION_INITIALIZER;
    cfg.kind = kind;
    cfg.error_feedback = kind == BAGUA_COMPRESS_MINMAX ? 1 : 0;
    bagua_lpdec_t host_lpdec, dev_lpdec;
    MP_OK(bagua_lpdec_create(comm, n, &cfg, w.data(), &host_lpdec));
    MP_OK(bagua_lpdec_create(comm, n, &cfg, static_cast<float*>(dw), &dev_lpdec));
    for (int step = 0; step < 3; ++step) {
      for (size_t i = 0; i < n; ++i) w[i] -= 0.25f * static_cast<float>((i + step) % 5);
      g_rt->copy_async(got.data(), dw, n * 4, nullptr);  // the device weights, updated the same way
      sync(nullptr);
      for (size_t i = 0; i < n; ++i) got[i] -= 0.25f * static_cast<float>((i + step) % 5);
      MP_OK(bagua_lpdec_step(host_lpdec, w.data()));
      if (step == 2) {  // a host x for the device replicas
        MP_OK(bagua_lpdec_step(dev_lpdec, got.data()));
        g_rt->copy_async(dw, got.data(), n * 4, nullptr);
        sync(nullptr);
      } else {
        g_rt->copy_async(dw, got.data(), n * 4, nullptr);
        sync(nullptr);
        MP_OK(bagua_lpdec_step(dev_lpdec, static_cast<float*>(dw)));
      }
    }
    g_rt->copy_async(got.data(), dw, n * 4, nullptr);
    sync(nullptr);
    MP_CHECK(got == w);
    MP_OK(bagua_lpdec_replica(host_lpdec, -1, replica_host.data(), n));
    MP_OK(bagua_lpdec_replica(dev_lpdec, -1, static_cast<float*>(dreplica), n));
    g_rt->copy_async(replica_dev.data(), dreplica, n * 4, nullptr);
    sync(nullptr);
    MP_CHECK(replica_dev == replica_host);
    for (int which : {0, 1}) {
      std::vector<float> host_side(n), dev_side(n);
      MP_OK(bagua_lpdec_replica(host_lpdec, which, host_side.data(), n));
      MP_OK(bagua_lpdec_replica(dev_lpdec, which, dev_side.data(), n));
      MP_CHECK(std::memcmp(host_side.data(), dev_side.data(), n * 4) == 0);
    }
    MP_OK(bagua_lpdec_destroy(host_lpdec));
    MP_OK(bagua_lpdec_destroy(dev_lpdec));
    g_rt->free_device(dw);
    g_rt->free_device(dreplica);
  }
  // Asynchronous averaging of a device buffer: with no updates, rounds make every rank's buffer the average
  // (ranks' values are small integers: the average (n - 1) / 2 and each step are exact).
  {
    const size_t n = 4096;
    std::vector<float> x(n, static_cast<float>(g_rank)), got(n);
    void* dx = g_rt->alloc_device(n * 4, 0);
    g_rt->copy_async(dx, x.data(), n * 4, nullptr);
    sync(nullptr);
    bagua_async_average_t avg;
    MP_OK(bagua_async_average_start(comm, dx, n, BAGUA_FLOAT32, 0, &avg));
    uint64_t rounds = 0;
    auto deadline = Clock::now() + std::chrono::seconds(20);
    while (rounds < 3 && Clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      MP_OK(bagua_async_average_stats(avg, &rounds));
    }
    MP_CHECK(rounds >= 3);
    MP_OK(bagua_async_average_lock(avg));  // a read of the buffer that must not tear
    g_rt->copy_async(got.data(), dx, n * 4, nullptr);
    sync(nullptr);
    MP_OK(bagua_async_average_unlock(avg));
    MP_OK(bagua_async_average_stop(avg));
    const float mean = static_cast<float>(g_size - 1) / 2;
    for (float v : got) MP_CHECK(v == mean);
    g_rt->free_device(dx);
  }
  if (g_rank == 0) std::printf("relaxations on device memory equal the host calls (%s): ok\n", g_rt->name());
  return 0;
}

// Run with BAGUA_TIMEOUT=2 and BAGUA_ALGO=alltoall:shm on the stand-in. Two device alltoalls on two streams: the
// first waits 3 s for its stream (a slow kernel), the second has its input at once and waits for its turn behind
// the first. Neither wait is a stall: both complete, exact.
int turn(bagua_comm_t comm) {
  StandinControl* standin = standin_control();
  if (standin == nullptr) {
    if (g_rank == 0) std::printf("turn: stand-in only, skipped\n");
    MP_OK(bagua_comm_destroy(comm));
    return 77;
  }
  void* slow = g_rt->create_stream(0);
  void* fast = g_rt->create_stream(0);
  const size_t count = 1024;  // per rank
  DevBuf a(count * g_size), b(count * g_size), c(count * g_size), d(count * g_size);
  for (size_t i = 0; i < a.host.size(); ++i) a.host[i] = c.host[i] = g_rank * 100000 + static_cast<int64_t>(i);
  a.upload(slow);
  c.upload(fast);
  sync(slow);
  sync(fast);
  standin->run_on_stream(slow, [] { std::this_thread::sleep_for(std::chrono::seconds(3)); });
  auto start = Clock::now();
  MP_OK(bagua_alltoall(a.dev, b.dev, count, BAGUA_INT64, comm, slow));
  MP_OK(bagua_alltoall(c.dev, d.dev, count, BAGUA_INT64, comm, fast));
  b.download(slow);
  d.download(fast);
  sync(slow);
  sync(fast);
  for (int p = 0; p < g_size; ++p)
    for (size_t i = 0; i < count; ++i) {
      const int64_t want = p * 100000 + static_cast<int64_t>(g_rank * count + i);
      MP_CHECK(b.host[p * count + i] == want);
      MP_CHECK(d.host[p * count + i] == want);
    }
  if (g_rank == 0) std::printf("turn: both alltoalls exact after %.1f s (BAGUA_TIMEOUT=2)\n", since(start));
  MP_OK(bagua_comm_destroy(comm));
  return 0;
}

int pipelined(bagua_comm_t comm) {
  void* stream = g_rt->create_stream(0);
  DeviceProxy& proxy = comm->impl->device_proxy();
  {  // Calls queued on one stream share the pool's blocks: staged on the caller's stream, each takes the block of the
     // stream's last call, which its copies reach only after that call's gate; on the proxy's data path
     // (mp_device_pipelined_2x2), each takes its staging when it starts. Under the limit (1 GiB) and near it (2x2:
     // 64 MiB, less than the 6 calls' 96 MiB), the pool grows by one block and two at most (it had filled 96 and
     // 64 MiB when each took its own block at the call). First, so that no earlier block fits these calls. Exact.
    const size_t c = (8 << 20) / sizeof(int64_t), staging = 2 * c * sizeof(int64_t);  // out of place: both buffers
    const size_t pool_before = proxy.pool_bytes();
    std::vector<std::unique_ptr<DevBuf>> ins, outs;
    for (int i = 0; i < 6; ++i) {
      ins.push_back(std::make_unique<DevBuf>(c));
      outs.push_back(std::make_unique<DevBuf>(c));
      for (size_t e = 0; e < c; ++e) ins.back()->host[e] = value(g_rank, e) + i;
      ins.back()->upload(stream);
      MP_OK(bagua_allreduce(ins.back()->dev, outs.back()->dev, c, BAGUA_INT64, BAGUA_SUM, comm, stream));
      outs.back()->download(stream);
    }
    sync(stream);
    for (int i = 0; i < 6; ++i)
      for (size_t e = 0; e < c; ++e) MP_CHECK(outs[i]->host[e] == value_sum(e) + i * g_size);
    // One block: each call's input follows the gate of the call before, whose block it takes or which ends first.
    const bool near_limit = 6 * staging > comm->impl->config().device_memory_limit;
    const size_t allowed = (near_limit ? 2 : 1) * staging, pool_after = proxy.pool_bytes();
    if (pool_after > pool_before + allowed)
      std::printf("rank %d: 6 queued calls of %zu bytes of staging grew the pool from %zu to %zu bytes\n", g_rank,
                  staging, pool_before, pool_after);
    MP_CHECK(pool_after <= pool_before + allowed);
  }
  // With BAGUA_PIPELINED_STAGING=0 no call is pipelined. Otherwise each is, and the allreduces (the ring or the
  // rail) also start steps before all their input is there and copy output pieces out before their last step.
  const bool on = proxy.pipelined_staging();
  uint64_t calls = proxy.pipelined_calls(), early = proxy.early_output_pieces(), overlapped = proxy.overlapped_steps();
  const uint64_t early_before = early;
  auto expect_pipelined = [&](const char* what, bool overlaps) {
    const uint64_t more_calls = proxy.pipelined_calls() - calls, more_early = proxy.early_output_pieces() - early,
                   more_overlapped = proxy.overlapped_steps() - overlapped;
    if (more_calls != (on ? 1u : 0u) || (on && overlaps && (more_early == 0 || more_overlapped == 0)))
      std::printf("rank %d: %s: %llu pipelined, %llu pieces out early, %llu steps overlapped\n", g_rank, what,
                  static_cast<unsigned long long>(more_calls), static_cast<unsigned long long>(more_early),
                  static_cast<unsigned long long>(more_overlapped));
    MP_CHECK(more_calls == (on ? 1u : 0u));
    if (on && overlaps) MP_CHECK(more_early > 0 && more_overlapped > 0);
    calls += more_calls;
    early += more_early;
    overlapped += more_overlapped;
  };
  const auto start = Clock::now();
  const size_t count = (12 << 20) / sizeof(int64_t) + 3;  // 12 MiB and a little: a short last piece
  DevBuf a(count), out(count);
  for (int salt = 0; salt < 2; ++salt) {
    exact_allreduce(comm, stream, a, nullptr, salt);  // in place
    expect_pipelined("allreduce in place", true);
    exact_allreduce(comm, stream, a, &out, salt + 2);
    expect_pipelined("allreduce out of place", true);
  }
  {  // average (the division in the last steps), int64: truncated toward zero
    for (size_t i = 0; i < count; ++i) a.host[i] = static_cast<int64_t>(i % 1009) * 5 + g_rank;
    a.upload(stream);
    MP_OK(bagua_allreduce(a.dev, a.dev, count, BAGUA_INT64, BAGUA_AVG, comm, stream));
    a.download(stream);
    sync(stream);
    for (size_t i = 0; i < count; ++i)
      MP_CHECK(a.host[i] == (static_cast<int64_t>(i % 1009) * 5 * g_size + rank_sum()) / g_size);
    expect_pipelined("average", true);
  }
  const int n = g_size, me = g_rank;
  {  // allgather of 12 MiB per rank
    const size_t c = count;
    DevBuf mine(c), all(c * n);
    for (size_t i = 0; i < c; ++i) mine.host[i] = value(me, i);
    mine.upload(stream);
    MP_OK(bagua_allgather(mine.dev, all.dev, c, BAGUA_INT64, comm, stream));
    all.download(stream);
    sync(stream);
    for (int p = 0; p < n; ++p)
      for (size_t i = 0; i < c; ++i) MP_CHECK(all.host[p * c + i] == value(p, i));
    expect_pipelined("allgather", false);
  }
  {  // reduce-scatter of 5 MB blocks
    const size_t c = 5000000 / sizeof(int64_t);
    DevBuf in(c * n), block(c);
    for (size_t i = 0; i < c * n; ++i) in.host[i] = value(me, i);
    in.upload(stream);
    MP_OK(bagua_reduce_scatter(in.dev, block.dev, c, BAGUA_INT64, BAGUA_SUM, comm, stream));
    block.download(stream);
    sync(stream);
    for (size_t i = 0; i < c; ++i) MP_CHECK(block.host[i] == value_sum(me * c + i));
    expect_pipelined("reduce-scatter", false);
  }
  {  // broadcast of 12 MiB from the last rank
    DevBuf b(count);
    for (size_t i = 0; i < count; ++i) b.host[i] = me == n - 1 ? value(me, i) : -1;
    b.upload(stream);
    MP_OK(bagua_broadcast(b.dev, b.dev, count, BAGUA_INT64, n - 1, comm, stream));
    b.download(stream);
    sync(stream);
    for (size_t i = 0; i < count; ++i) MP_CHECK(b.host[i] == value(n - 1, i));
    expect_pipelined("broadcast", false);
  }
  {  // alltoallv of 5 MiB per rank as a request, with gaps in the output that it must leave as they were: the
     // staging copies the whole output in, in pieces that no step touches. Exact, gaps kept.
    const size_t block = (5 << 20) / sizeof(int64_t) / n, gap = 1000;
    std::vector<size_t> counts(n, block), sdispls(n), rdispls(n);
    for (int p = 0; p < n; ++p) {
      sdispls[p] = p * block;
      rdispls[p] = p * (block + gap);
    }
    DevBuf in(block * n), out((block + gap) * n);
    for (size_t i = 0; i < in.host.size(); ++i) in.host[i] = value(me, i);
    for (auto& v : out.host) v = -7;
    in.upload(stream);
    out.upload(stream);
    sync(stream);
    bagua_request_t req = nullptr;
    MP_OK(bagua_ialltoallv(in.dev, counts.data(), sdispls.data(), out.dev, counts.data(), rdispls.data(), BAGUA_INT64,
                           comm, &req));
    MP_OK(bagua_wait(req));
    out.download(stream);
    sync(stream);
    for (int p = 0; p < n; ++p) {
      for (size_t i = 0; i < block; ++i) MP_CHECK(out.host[rdispls[p] + i] == value(p, me * block + i));
      for (size_t i = 0; i < gap; ++i) MP_CHECK(out.host[rdispls[p] + block + i] == -7);
    }
  }
  if (g_rank == 0)
    std::printf(
        "pipelined (%s): 8 staged calls and a request exact in %.2f s, %llu output pieces out early, %llu steps "
        "overlapped "
        "the input's copy\n",
        on ? "on" : "off", since(start), static_cast<unsigned long long>(early - early_before),
        static_cast<unsigned long long>(overlapped));
  g_rt->destroy_stream(stream);
  return 0;
}

// A call that needs the staging of a long operation ahead of it on the stream waits for it as long as that
// operation progresses (run with BAGUA_TIMEOUT=2, BAGUA_STANDIN_COPY_US=1200000 and a limit that holds one call's
// staging: each copy takes 1.2 s, so the first call holds its block for about 2.4 s, progressing at 1.2 s). Until
// 2026-12-06 the second call failed after BAGUA_TIMEOUT counted from the call. Behind a call whose stream is busy
// (it does not progress), the wait fails after the timeout naming the staging, with no side effect; behind a call
// that a peer never joins, it ends with the communicator's failure.
int long_ahead(bagua_comm_t comm) {
  void* stream = g_rt->create_stream(0);
  const size_t count = 75000;  // 600 KB, in place: two do not fit the 1 MiB limit
  DevBuf a(count), b(count);
  auto fill_and_upload = [&](int64_t va, int64_t vb) {
    for (auto& v : a.host) v = va;
    for (auto& v : b.host) v = vb;
    a.upload(stream);
    b.upload(stream);
    sync(stream);  // (a stream busy before the call counts as no progress of the call)
  };
  fill_and_upload(2, 9);
  MP_OK(bagua_barrier(comm, nullptr));
  auto start = Clock::now();
  MP_OK(bagua_allreduce(a.dev, a.dev, count, BAGUA_INT64, BAGUA_SUM, comm, stream));
  MP_OK(bagua_allreduce(b.dev, b.dev, count, BAGUA_INT64, BAGUA_SUM, comm, stream));
  const double second_returned = since(start);
  a.download(stream);
  b.download(stream);
  sync(stream);
  for (int64_t v : a.host) MP_CHECK(v == 2 * g_size);
  for (int64_t v : b.host) MP_CHECK(v == 9 * g_size);
  if (g_rank == 0)
    std::printf("long_ahead: the second call returned after %.1f s (BAGUA_TIMEOUT %s s), both exact\n", second_returned,
                std::getenv("BAGUA_TIMEOUT"));
  MP_CHECK(second_returned > 2.0);  // it did wait past the timeout

  // The stream busy for 6 s before the first call (five copies of 1.2 s): the second call's wait fails on every
  // rank at about the timeout, before it takes a sequence number; the first call then runs, and so do later ones.
  fill_and_upload(4, 0);
  MP_OK(bagua_barrier(comm, nullptr));
  for (int i = 0; i < 5; ++i) b.upload(stream);
  MP_OK(bagua_allreduce(a.dev, a.dev, count, BAGUA_INT64, BAGUA_SUM, comm, stream));
  start = Clock::now();
  bagua_status_t status = bagua_allreduce(b.dev, b.dev, count, BAGUA_INT64, BAGUA_SUM, comm, stream);
  const double failed_after = since(start);
  std::string error = bagua_get_last_error(comm);
  if (g_rank == 0)
    std::printf("long_ahead: behind a call whose stream is busy, after %.1f s: %s: %s\n", failed_after,
                bagua_status_string(status), error.c_str());
  MP_CHECK(status == BAGUA_ERR_TIMEOUT);
  MP_CHECK(error.find("staging memory") != std::string::npos);
  MP_CHECK(failed_after < 5.0);
  a.download(stream);
  sync(stream);
  for (int64_t v : a.host) MP_CHECK(v == 4 * g_size);
  int64_t one = 1, total = 0;
  MP_OK(bagua_allreduce(&one, &total, 1, BAGUA_INT64, BAGUA_SUM, comm, nullptr));
  MP_CHECK(total == g_size);

  // Rank 1 makes a call that rank 0 never joins: its next call's wait ends when the communicator fails (the first
  // call made no progress for the timeout), with that error.
  if (g_rank == 1) {
    MP_OK(bagua_allreduce(a.dev, a.dev, count, BAGUA_INT64, BAGUA_SUM, comm, stream));
    start = Clock::now();
    status = bagua_allreduce(b.dev, b.dev, count, BAGUA_INT64, BAGUA_SUM, comm, stream);
    const double ended_after = since(start);
    error = bagua_get_last_error(comm);
    std::printf("long_ahead: behind a call no peer joins, after %.1f s: %s: %s\n", ended_after,
                bagua_status_string(status), error.c_str());
    MP_CHECK(status == BAGUA_ERR_TIMEOUT);
    MP_CHECK(error.find("made no progress") != std::string::npos);
    MP_CHECK(error.find("staging memory") == std::string::npos);
    MP_CHECK(ended_after < 8.0);
    sync(stream);  // the stalled call's stream is released once the communicator fails
  } else {
    std::this_thread::sleep_for(std::chrono::seconds(10));
  }
  bagua_comm_destroy(comm);
  g_rt->destroy_stream(stream);
  return 0;
}

int lagging(bagua_comm_t comm) {
  const char* lag_text = std::getenv("BAGUA_STANDIN_WAIT_LAG_US");
  const double lag = lag_text ? std::atof(lag_text) / 1e6 : 0.0;
  if (standin_control() == nullptr || lag <= 0) {
    if (g_rank == 0) std::printf("skipping: a lagging stream is played by the stand-in (BAGUA_STANDIN_WAIT_LAG_US)\n");
    MP_OK(bagua_comm_destroy(comm));
    return 77;
  }
  bagua_comm_t next = nullptr;
  MP_OK(bagua_comm_split(comm, 0, g_rank, &next));  // (its proxy starts at its first device call)
  void* stream = g_rt->create_stream(0);
  DevBuf a(4099), b(8191);
  for (size_t i = 0; i < a.host.size(); ++i) a.host[i] = g_rank + static_cast<int64_t>(i);
  for (size_t i = 0; i < b.host.size(); ++i) b.host[i] = 3 * g_rank - static_cast<int64_t>(i);
  a.upload(stream);
  b.upload(stream);
  sync(stream);
  auto start = Clock::now();
  MP_OK(bagua_allreduce(a.dev, a.dev, a.host.size(), BAGUA_INT64, BAGUA_SUM, comm, stream));
  MP_OK(bagua_comm_destroy(comm));  // the stream has not reached the call's gate yet
  const double destroyed = since(start);
  const uint64_t taken_before = DeviceProxy::gate_pages_taken_over();
  MP_OK(bagua_allreduce(b.dev, b.dev, b.host.size(), BAGUA_INT64, BAGUA_SUM, next, stream));
  const uint64_t taken = DeviceProxy::gate_pages_taken_over() - taken_before;
  a.download(stream);
  b.download(stream);
  sync(stream);
  const double completed = since(start);
  const int64_t n = g_size;
  for (size_t i = 0; i < a.host.size(); ++i) MP_CHECK(a.host[i] == rank_sum() + n * static_cast<int64_t>(i));
  for (size_t i = 0; i < b.host.size(); ++i) MP_CHECK(b.host[i] == 3 * rank_sum() - n * static_cast<int64_t>(i));
  MP_OK(bagua_comm_destroy(next));
  g_rt->destroy_stream(stream);
  if (g_rank == 0)
    std::printf(
        "lagging stream: communicator destroyed after %.0f ms, %llu gate page taken over, the stream reached its "
        "gates after %.0f ms: exact\n",
        destroyed * 1e3, static_cast<unsigned long long>(taken), completed * 1e3);
  MP_CHECK(taken == 1);           // the second call's gate is on the destroyed communicator's page
  MP_CHECK(destroyed < lag);      // the communicator was gone before the stream reached the gate
  MP_CHECK(completed > 2 * lag);  // and the stream passed both gates, each after the lag
  return 0;
}

int main(int argc, char** argv) {
  std::string mode = argc > 1 ? argv[1] : "semantics";
  // The relaxations mode checks quantization itself, at sizes below the full-precision size, and the phases' timing.
  setenv("BAGUA_QUANTIZED_MIN_BYTES", "0", 0);
  if (mode == "relaxations") setenv("BAGUA_DEVICE_TIMING", "1", 0);
  g_rt = &device_runtime();
  if (!g_rt->usable()) {
    std::printf("skipping: no CUDA device (BAGUA_DEVICE_STANDIN=1 runs the host stand-in)\n");
    return 77;
  }
  if (mode == "threads") return threads();
  if (mode == "ipc_stream") setenv("BAGUA_DEVICE_DATA_PATH", "stream", 1);
  if (mode == "capture") return capture();
  // ipc: shared memory wins alltoall(v) on host memory, so the cost model never picks their peer_memory algorithm.
  // It checks the IPC path, which the proxy runs (BAGUA_DEVICE_DATA_PATH=proxy).
  if (mode == "ipc") {
    setenv("BAGUA_ALGO", "alltoall:peer_memory;alltoallv:peer_memory", 1);
    setenv("BAGUA_DEVICE_DATA_PATH", "proxy", 1);
  }
  bagua_comm_t comm = nullptr;
  MP_OK(bagua_comm_init_from_env(&comm));
  MP_OK(bagua_comm_rank(comm, &g_rank));
  MP_OK(bagua_comm_size(comm, &g_size));
  if (mode == "failure") return failure(comm, argc > 2 && std::string(argv[2]) == "quantized");
  if (mode == "abort") return abort_enqueued(comm);
  if (mode == "limit") return limit(comm);
  if (mode == "long_ahead") return long_ahead(comm);
  if (mode == "blocked") return blocked(comm);
  if (mode == "turn") return turn(comm);
  if (mode == "lagging") return lagging(comm);
  if (mode == "pipelined") {
    int rc = pipelined(comm);
    MP_OK(bagua_comm_destroy(comm));
    return rc;
  }
  if (mode == "ipc_stream") {
    int rc = argc > 2 && std::string(argv[2]) == "evict" ? ipc_stream_evict(comm) : ipc_stream(comm);
    MP_OK(bagua_comm_destroy(comm));
    return rc;
  }
  if (mode == "ipc") {
    const std::string how = argc > 2 ? argv[2] : "";
    int rc = ipc(comm, how.rfind("staged", 0) == 0, how == "staged-open-fails");
    MP_OK(bagua_comm_destroy(comm));
    return rc;
  }
  int rc = mode == "relaxations" ? relaxations(comm) : semantics(comm);
  MP_OK(bagua_comm_destroy(comm));
  if (g_rank == 0 && rc == 0) std::printf("device %s on %d ranks (%s): ok\n", mode.c_str(), g_size, g_rt->name());
  return rc;
}

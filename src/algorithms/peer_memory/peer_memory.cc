#include "algorithms/peer_memory/peer_memory.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <functional>
#include <set>
#include <utility>

#include "algorithms/alltoall/layout.h"
#include "algorithms/registry.h"
#include "base/error.h"
#include "base/logging.h"
#include "base/process_identity.h"
#include "base/scratch_cache.h"
#include "core/device_proxy.h"
#include "kernels/cpu/reduce.h"
#include "kernels/dtype.h"
#include "transport/cross_memory.h"

namespace bagua {

namespace {

enum : uint32_t { kHostMemory = 0, kDeviceMappable = 1, kDeviceStaged = 2, kNoBuffers = 3 };
constexpr uint32_t kMostReachableGpus = 8;
constexpr size_t kSegmentBytes = 256 << 10;  // one read or write; a reduction's pieces stay in cache
constexpr size_t kSegmentsPerCheck = 16;
constexpr size_t kMostStagingCopies = 4;  // a call's copies into and out of its staging (dispatch's layout)

// Round 0's message to one peer (rounds 2 repeats it with staging addresses).
struct PeerBuffers {
  uint64_t process = 0;  // process_key(): the pid and its PID namespace
  uint64_t sendbuf = 0, recvbuf = 0;
  uint64_t send_extent = 0, recv_extent = 0;  // bytes
  uint64_t count = 0;
  // alltoall(v): this rank's block for the receiver, and the bytes it expects from the receiver (both sides check).
  uint64_t offset_for_you = 0, bytes_for_you = 0, bytes_from_you = 0;
  uint32_t collective = 0, dtype = 0, op = 0;
  int32_t root = 0;
  // Device calls only: where the buffers live and, when peers can map them, how.
  uint32_t memory = kHostMemory;
  uint32_t reachable_count = 0;
  GpuId gpu{};
  GpuId reachable[kMostReachableGpus]{};  // GPUs this rank's kernels can access, its own included
  uint64_t send_base = 0, send_buffer_id = 0, recv_base = 0, recv_buffer_id = 0;
  IpcHandle send_handle{}, recv_handle{};
};
static_assert(sizeof(PeerBuffers) == 400, "tests/mp/mp_allreduce.cc counts the bytes this message adds");

// Describes this rank's device buffers for its peers (round 0).
void describe_device_buffers(DeviceRuntime& runtime, const CollectiveArgs& a, PeerBuffers* mine) {
  mine->memory = kDeviceStaged;
  DeviceAllocation send{}, recv{};
  const bool has_send = a.send_extent > 0, has_recv = a.recv_extent > 0;
  // A buffer must lie within its allocation for peers to use it through the mapping (a call on a buffer shorter
  // than its count stages, and its copy fails here rather than a peer's kernel elsewhere).
  auto mappable = [&runtime](const void* buffer, size_t extent, DeviceAllocation* allocation) {
    const auto at = reinterpret_cast<uintptr_t>(buffer);
    return runtime.allocation(buffer, allocation) && allocation->exportable && at >= allocation->base &&
           extent <= allocation->bytes - (at - allocation->base);
  };
  if ((has_send && !mappable(a.sendbuf, a.send_extent, &send)) ||
      (has_recv && !mappable(a.recvbuf, a.recv_extent, &recv)))
    return;
  try {
    mine->gpu = runtime.gpu_id(a.device);
    std::vector<GpuId> reachable = runtime.reachable_gpus(a.device);
    mine->reachable_count = static_cast<uint32_t>(std::min<size_t>(reachable.size(), kMostReachableGpus));
    std::copy_n(reachable.begin(), mine->reachable_count, mine->reachable);
    if (has_send) runtime.export_ipc(send.base, &mine->send_handle);
    if (has_recv && has_send && recv.base == send.base)
      mine->recv_handle = mine->send_handle;
    else if (has_recv)
      runtime.export_ipc(recv.base, &mine->recv_handle);
  } catch (const Error&) {
    return;  // not mappable after all: the ranks stage
  }
  mine->send_base = send.base;
  mine->send_buffer_id = send.buffer_id;
  mine->recv_base = recv.base;
  mine->recv_buffer_id = recv.buffer_id;
  mine->memory = kDeviceMappable;
}

// Peers that are threads of this process read and write each other's device buffers on the strength of messages
// that pass through UCX's shared memory, which the C++ memory model (and ThreadSanitizer) does not count as
// synchronization. An acquire-release step on one process-wide word after each such message arrives and before
// each is sent makes the order explicit.
std::atomic<uint64_t> g_peer_order{0};
void order_with_peers() { g_peer_order.fetch_add(1, std::memory_order_acq_rel); }

bool reaches(const PeerBuffers& from, const GpuId& gpu) {
  for (uint32_t i = 0; i < std::min(from.reachable_count, kMostReachableGpus); ++i)
    if (from.reachable[i] == gpu) return true;
  return false;
}

bool on_device_memory(const PeerBuffers& p) { return p.memory == kDeviceMappable || p.memory == kDeviceStaged; }

struct PeerMemoryWork {
  Schedule* schedule = nullptr;
  CollectiveArgs args;
  PeerPlanBuilder build_plan = nullptr;
  int rank = 0;
  int nranks = 0;
  AlltoallvCounts alltoallv_counts;  // args' count arrays point here
  PeerBuffers mine;
  std::vector<PeerBuffers> mine_for;  // [p]: round 0's message to p
  std::vector<PeerBuffers> peers;     // [r]: rank r's, from round 0 (round 2 for its staging)
  PeerPlan plan;
  uint8_t done = 1;
  std::vector<uint8_t> done_from;
  std::function<void()> check_peers;

  // Device calls: the device operation, whether its staging was asked for, and what the ranks decided.
  DeviceOperation* device = nullptr;
  bool staging_asked = false;
  bool on_ipc = false;
  uint8_t mapped_ok = 1;
  std::vector<uint8_t> voted;                      // [r]: whether rank r mapped its peers (round 1)
  std::vector<std::shared_ptr<void>> mappings;     // peers' buffers, mapped until the call ends
  std::vector<uint8_t*> mapped_send, mapped_recv;  // [r]: rank r's buffers here (IPC)

  // On the caller's stream (docs/cuda.md, "The IPC path on the caller's stream"): the plan's kernels and the
  // staging copies were enqueued at the call on late spans; deciding writes the words of one or the other. IPC words
  // first (rank r's send buffer at 2r, its receive buffer at 2r + 1), then two per staging copy (destination,
  // source), the copies in before the copies out.
  bool on_stream = false;
  uint64_t* words = nullptr;
  std::vector<DeviceCopy> stage_in, stage_out;

  const char* name() const { return collective_name(args.collective); }

  void check_agreement() const {
    const size_t elem = datatype_size(args.dtype);
    const AlltoallLayout layout = alltoall_layout(args, nranks);
    const bool alltoall = args.collective == Collective::kAlltoall || args.collective == Collective::kAlltoallv;
    for (int r = 0; r < nranks; ++r) {
      if (r == rank) continue;
      const PeerBuffers& p = peers[r];
      if (p.collective != mine.collective || p.count != mine.count || p.dtype != mine.dtype || p.op != mine.op ||
          p.root != mine.root)
        fail(BAGUA_ERR_INVALID_USAGE,
             "rank {} called {} with {} x {} ({}, root {}), this rank {} with {} x {} ({}, root {})", r,
             p.collective < static_cast<uint32_t>(Collective::kCount)
                 ? collective_name(static_cast<Collective>(p.collective))
                 : "another call",
             p.count, datatype_name(static_cast<bagua_datatype_t>(p.dtype)),
             redop_name(static_cast<bagua_redop_t>(p.op)), p.root, name(), mine.count, datatype_name(args.dtype),
             redop_name(args.op), mine.root);
      if (alltoall && p.bytes_for_you != layout.recv_bytes(r))
        fail(BAGUA_ERR_INVALID_USAGE, "rank {} sends this rank {} elements of {}, this rank receives {}", r,
             p.bytes_for_you / elem, name(), layout.recv_bytes(r) / elem);
      if (alltoall && p.bytes_from_you != layout.send_bytes(r))
        fail(BAGUA_ERR_INVALID_USAGE, "rank {} receives {} elements of {} from this rank, this rank sends {}", r,
             p.bytes_from_you / elem, name(), layout.send_bytes(r) / elem);
    }
  }

  PeerCallFacts facts() const {
    PeerCallFacts call{rank, nranks, args, std::vector<size_t>(nranks), std::vector<size_t>(nranks)};
    for (int r = 0; r < nranks; ++r) {
      call.offset_for_me[r] = peers[r].offset_for_you;
      call.bytes_for_me[r] = peers[r].bytes_for_you;
    }
    return call;
  }

  // Every span of the plan lies within the buffer its rank described (a disagreement the checks above missed
  // never reads or writes out of bounds).
  void check_span(const PeerSpan& s, size_t bytes) const {
    const PeerBuffers& p = peers[s.rank];
    const uint64_t extent = s.buffer == PeerBufferKind::kSend ? p.send_extent : p.recv_extent;
    if (s.offset > extent || bytes > extent - s.offset)
      fail(BAGUA_ERR_INVALID_USAGE, "{}: {} bytes at {} of rank {}'s {} buffer, which has {}", name(), bytes, s.offset,
           s.rank, s.buffer == PeerBufferKind::kSend ? "send" : "receive", extent);
  }

  void check_plan() const {
    const size_t elem = datatype_size(args.dtype);
    for (const PeerCopy& c : plan.copies) {
      check_span(c.to, c.bytes);
      check_span(c.from, c.bytes);
    }
    for (const PeerReduce& r : plan.reductions) {
      for (const PeerSpan& s : r.sources) check_span(s, r.count * elem);
      for (const PeerSpan& s : r.destinations) check_span(s, r.count * elem);
    }
  }

  // After round 0, the same on every rank. Then each rank maps the peers' buffers its plan touches and votes in
  // round 1 whether that worked.
  void propose(Round& votes) {
    if (device != nullptr) order_with_peers();
    peers[rank] = mine;
    check_agreement();
    if (!on_stream) plan = build_plan(facts());  // (on the stream: built at the call, the same without alltoall)
    check_plan();
    on_ipc = false;
    for (int r = 0; r < nranks; ++r) {
      if (peers[r].memory == kNoBuffers) continue;
      if (peers[r].memory != kDeviceMappable) {
        on_ipc = false;
        break;
      }
      on_ipc = true;
      for (int q = 0; q < nranks && on_ipc; ++q)
        on_ipc =
            peers[q].memory != kDeviceMappable ||
            (reaches(peers[q], peers[r].gpu) && (peers[q].process != peers[r].process || peers[q].gpu == peers[r].gpu));
      if (!on_ipc) break;
    }
    if (!on_ipc) return;
    if (device == nullptr && (!plan.copies.empty() || !plan.reductions.empty()))
      fail(BAGUA_ERR_INTERNAL, "{}: a plan without device buffers on IPC", name());
    try {
      if (on_stream)
        mapped_ok = find_mapped_peers() ? 1 : 0;
      else
        map_peers();
    } catch (const Error& e) {
      static std::atomic<bool> warned{false};
      if (!warned.exchange(true))
        BAGUA_WARN(
            "{}: mapping the peers' device buffers through IPC failed, staging instead (said once per process): {}",
            name(), e.what());
      mapped_ok = 0;
      mappings.clear();
    }
    voted.resize(nranks);
    for (int r = 0; r < nranks; ++r) {
      if (r == rank) continue;
      votes.recvs.push_back({r, &voted[r], 1});
      votes.sends.push_back({r, &mapped_ok, 1});
    }
  }

  // After round 1: through IPC if every rank mapped its peers; else ranks on device memory stage, and round 2
  // carries their staging addresses. (Rounds 1 and 2 have room: they post at most what round 0 did.)
  void decide(Round& addresses) {
    for (int r = 0; r < nranks && on_ipc; ++r) on_ipc = (r == rank ? mapped_ok : voted[r]) != 0;
    if (device != nullptr) {
      device->proxy().count_in_host_call(on_ipc);
      BAGUA_DEBUG("{} of {} elements on device memory: {}", name(), args.count,
                  on_ipc ? "through IPC"
                         : "staged (a rank is on host or unmappable memory, GPUs cannot reach each other, or a "
                           "mapping failed)");
    }
    if (on_ipc && on_stream) {
      run_on_stream_through_ipc();
      return;
    }
    if (on_ipc) {
      if (device != nullptr) device->release_staging();
      return;
    }
    mappings.clear();
    if (on_stream) {
      stage_on_stream(addresses);
      return;
    }
    for (int r = 0; r < nranks; ++r)
      if (r != rank && on_device_memory(peers[r])) addresses.recvs.push_back({r, &peers[r], sizeof(PeerBuffers)});
    if (!on_device_memory(mine)) return;
    for (int r = 0; r < nranks; ++r)
      if (r != rank) addresses.sends.push_back({r, &mine_for[r], sizeof(PeerBuffers)});
    // The staging addresses go out once the input is staged.
    addresses.ready = [this] {
      if (!staging_asked) {
        device->take_staging();
        staging_asked = true;
        use_staged_buffers();
        device->stage_in();
        device->stage_out_at_end();
      }
      return device->staged_in();
    };
  }

  // The plan runs on this rank's staging, which its description (round 2's message) now names.
  void use_staged_buffers() {
    args.sendbuf = device->staged_send();
    args.recvbuf = device->staged_recv();
    for (PeerBuffers* p : message_copies()) {
      p->sendbuf = reinterpret_cast<uintptr_t>(args.sendbuf);
      p->recvbuf = reinterpret_cast<uintptr_t>(args.recvbuf);
      p->memory = kHostMemory;
    }
  }

  // Where this rank's description lives: its own, the copy the plan reads, and the message to each peer.
  std::vector<PeerBuffers*> message_copies() {
    std::vector<PeerBuffers*> all{&mine, &peers[rank]};
    for (PeerBuffers& p : mine_for) all.push_back(&p);
    return all;
  }

  void run_plan() {
    if (check_peers) check_peers();
    if (on_ipc && on_stream) return;  // (the caller's stream runs it)
    if (on_ipc)
      run_on_device();
    else
      run_on_host();
  }

  // ---- on the caller's stream ----

  size_t staging_word(size_t k) const { return 2 * static_cast<size_t>(nranks) + 2 * k; }
  LateSpan late(const PeerSpan& s) const {
    return {&words[2 * s.rank + (s.buffer == PeerBufferKind::kRecv ? 1 : 0)], s.offset};
  }
  const uint8_t* own_address(const PeerSpan& s) const {
    return (s.buffer == PeerBufferKind::kSend ? static_cast<const uint8_t*>(args.sendbuf)
                                              : static_cast<const uint8_t*>(args.recvbuf)) +
           s.offset;
  }

  // At the call: the plan (alltoall(v) never comes here: its plan needs the peers' counts), the words at 0, and the
  // phases: none (the stream has reached the call: its input is final); the plan's kernels and the copies into the
  // staging; the copies out of the staging (after the call's gate).
  void prepare_on_stream(const std::shared_ptr<PeerMemoryWork>& self) {
    on_stream = true;
    plan = build_plan(PeerCallFacts{rank, nranks, args, std::vector<size_t>(nranks), std::vector<size_t>(nranks)});
    stage_in = device->copies_in();
    stage_out = device->copies_out();
    if (stage_in.size() + stage_out.size() > kMostStagingCopies)
      fail(BAGUA_ERR_INTERNAL, "{}: {} staging copies", name(), stage_in.size() + stage_out.size());
    words = device->late_words();
    std::fill(words, words + staging_word(stage_in.size() + stage_out.size()), uint64_t{0});
    auto late_copies = [self](size_t first_word, const std::vector<DeviceCopy>& copies, DeviceStream stream) {
      DeviceRuntime& runtime = self->device->proxy().runtime();
      for (size_t k = 0; k < copies.size(); ++k) {
        const size_t at = self->staging_word(first_word + k);
        runtime.late_copy_async({&self->words[at], 0}, {&self->words[at + 1], 0}, copies[k].bytes, stream);
      }
    };
    std::vector<std::function<void(DeviceStream)>> phases;
    phases.push_back([](DeviceStream) {});
    phases.push_back([self, late_copies](DeviceStream stream) {
      PeerMemoryWork& w = *self;
      DeviceRuntime& runtime = w.device->proxy().runtime();
      for (const PeerCopy& c : w.plan.copies) {
        if (c.to.rank == w.rank && c.from.rank == w.rank && w.own_address(c.to) == w.own_address(c.from)) continue;
        runtime.late_copy_async(w.late(c.to), w.late(c.from), c.bytes, stream);
      }
      for (const PeerReduce& r : w.plan.reductions) {
        std::vector<LateSpan> destinations, sources;
        for (const PeerSpan& s : r.destinations) destinations.push_back(w.late(s));
        for (const PeerSpan& s : r.sources) sources.push_back(w.late(s));
        runtime.late_reduce_spans_async(destinations, sources, r.count, w.args.dtype, w.args.op,
                                        w.args.op == BAGUA_AVG ? w.nranks : 0, stream);
      }
      late_copies(0, w.stage_in, stream);
    });
    phases.push_back(
        [self, late_copies](DeviceStream stream) { late_copies(self->stage_in.size(), self->stage_out, stream); });
    device->set_phases(std::move(phases));
  }

  // Round 1's vote on the caller's stream: whether this communicator has every peer's buffer the plan touches mapped
  // already (opened by calling threads: the proxy thread makes no CUDA call). Those it lacks are asked for, so that
  // its next device call opens them and a later call on the same buffers goes through IPC.
  bool find_mapped_peers() {
    const auto used = buffers_touched();
    CallerIpcMappings& cache = device->proxy().caller_mappings();
    bool all = true;
    for (auto [r, buffer] : used) {
      if (r == rank) continue;
      const PeerBuffers& p = peers[r];
      const bool send = buffer == PeerBufferKind::kSend;
      const uint64_t address = send ? p.sendbuf : p.recvbuf, base = send ? p.send_base : p.recv_base;
      uint8_t*& mapped = (send ? mapped_send : mapped_recv)[r];
      if (p.process == process_key()) {
        mapped = reinterpret_cast<uint8_t*>(address);
        continue;
      }
      const uint64_t buffer_id = send ? p.send_buffer_id : p.recv_buffer_id;
      std::shared_ptr<void> mapping = cache.find(p.process, base, buffer_id, args.device);
      if (!mapping) {
        cache.request(p.process, base, buffer_id, send ? p.send_handle : p.recv_handle, args.device);
        all = false;
        continue;
      }
      mapped = static_cast<uint8_t*>(mapping.get()) + (address - base);
      mappings.push_back(std::move(mapping));
    }
    return all;
  }

  // Through IPC: the words of every buffer the plan touches, then the stream may run the plan (gate 1). The call's
  // "done" goes out once the stream has (phase 1's word).
  void run_on_stream_through_ipc() {
    // (A stream released after a failure runs the plan with whatever words it finds: write none then.)
    if (device->proxy().streams_released()) fail(BAGUA_ERR_TIMEOUT, "{}: its stream was released", name());
    // The kernels use the mappings until the stream has passed the call, also after a failure.
    for (const std::shared_ptr<void>& mapping : mappings) device->hold_until_output(mapping);
    const size_t elem = datatype_size(args.dtype);
    uint64_t sent = 0, received = 0;
    for (int r = 0; r < nranks; ++r) {
      words[2 * r] = reinterpret_cast<uintptr_t>(mapped_send[r]);
      words[2 * r + 1] = reinterpret_cast<uintptr_t>(mapped_recv[r]);
    }
    for (const PeerCopy& c : plan.copies) {
      received += c.from.rank != rank ? c.bytes : 0;
      sent += c.to.rank != rank ? c.bytes : 0;
    }
    for (const PeerReduce& r : plan.reductions) {
      for (const PeerSpan& s : r.sources) received += s.rank != rank ? r.count * elem : 0;
      for (const PeerSpan& s : r.destinations) sent += s.rank != rank ? r.count * elem : 0;
    }
    schedule->add_direct_traffic(sent, received);
    device->open_phase(1);
  }

  // Staged: the staging copies' words, then the stream copies the input in (gate 1); the staging addresses go out
  // once it has, and the plan runs on host memory; the copies out follow the call's gate.
  void stage_on_stream(Round& addresses) {
    if (device->proxy().streams_released()) fail(BAGUA_ERR_TIMEOUT, "{}: its stream was released", name());
    size_t k = 0;
    for (const std::vector<DeviceCopy>* copies : {&stage_in, &stage_out})
      for (const DeviceCopy& c : *copies) {
        words[staging_word(k)] = reinterpret_cast<uintptr_t>(c.dst);
        words[staging_word(k) + 1] = reinterpret_cast<uintptr_t>(c.src);
        ++k;
      }
    device->open_phase(1);
    for (int r = 0; r < nranks; ++r)
      if (r != rank && on_device_memory(peers[r])) addresses.recvs.push_back({r, &peers[r], sizeof(PeerBuffers)});
    use_staged_buffers();
    for (int r = 0; r < nranks; ++r)
      if (r != rank) addresses.sends.push_back({r, &mine_for[r], sizeof(PeerBuffers)});
    addresses.ready = [this] { return device->phase_done(1); };
  }

  // ---- IPC ----

  // Peer r's buffer at `address` in its process: the pointer itself for a thread of this process, else its IPC
  // mapping here.
  uint8_t* peer_pointer(int r, uint64_t address, uint64_t base, uint64_t buffer_id, const IpcHandle& handle) {
    if (peers[r].process == process_key()) return reinterpret_cast<uint8_t*>(address);
    std::shared_ptr<void> mapping = device->ipc_cache().map(peers[r].process, base, buffer_id, handle, args.device);
    mappings.push_back(mapping);
    return static_cast<uint8_t*>(mapping.get()) + (address - base);
  }

  // The ranks' buffers the plan touches; this rank's own are in mapped_send and mapped_recv already, the peers' to
  // be filled in.
  std::set<std::pair<int, PeerBufferKind>> buffers_touched() {
    std::set<std::pair<int, PeerBufferKind>> used;
    auto use = [&](const PeerSpan& s) { used.insert({s.rank, s.buffer}); };
    for (const PeerCopy& c : plan.copies) use(c.to), use(c.from);
    for (const PeerReduce& r : plan.reductions) {
      for (const PeerSpan& s : r.sources) use(s);
      for (const PeerSpan& s : r.destinations) use(s);
    }
    mapped_send.assign(nranks, nullptr);
    mapped_recv.assign(nranks, nullptr);
    mapped_send[rank] = static_cast<uint8_t*>(const_cast<void*>(args.sendbuf));
    mapped_recv[rank] = static_cast<uint8_t*>(args.recvbuf);
    return used;
  }

  void map_peers() {
    for (auto [r, buffer] : buffers_touched()) {
      if (r == rank) continue;
      const PeerBuffers& p = peers[r];
      if (buffer == PeerBufferKind::kSend)
        mapped_send[r] = peer_pointer(r, p.sendbuf, p.send_base, p.send_buffer_id, p.send_handle);
      else
        mapped_recv[r] = peer_pointer(r, p.recvbuf, p.recv_base, p.recv_buffer_id, p.recv_handle);
    }
  }

  uint8_t* mapped(const PeerSpan& s) const {
    return (s.buffer == PeerBufferKind::kSend ? mapped_send : mapped_recv)[s.rank] + s.offset;
  }

  void run_on_device() {
    if (plan.copies.empty() && plan.reductions.empty()) return;
    const size_t elem = datatype_size(args.dtype);
    DeviceRuntime& runtime = device->proxy().runtime();
    uint64_t sent = 0, received = 0;
    device->issue_work([&](DeviceStream stream) {
      for (const PeerCopy& c : plan.copies) {
        uint8_t *to = mapped(c.to), *from = mapped(c.from);
        if (to != from) runtime.copy_async(to, from, c.bytes, stream);
        if (c.from.rank != rank) received += c.bytes;
        if (c.to.rank != rank) sent += c.bytes;
      }
      for (const PeerReduce& r : plan.reductions) {
        // One pass: every source read once, every destination written once.
        std::vector<void*> destinations;
        std::vector<const void*> sources;
        for (const PeerSpan& s : r.destinations) destinations.push_back(mapped(s));
        for (const PeerSpan& s : r.sources) sources.push_back(mapped(s));
        runtime.reduce_spans_async(destinations, sources, r.count, args.dtype, args.op,
                                   args.op == BAGUA_AVG ? nranks : 0, stream);
        const size_t bytes = r.count * elem;
        for (const PeerSpan& s : r.sources) received += s.rank != rank ? bytes : 0;
        for (const PeerSpan& s : r.destinations) sent += s.rank != rank ? bytes : 0;
      }
    });
    schedule->add_direct_traffic(sent, received);
  }

  // ---- cross-memory attach ----

  uint64_t address(const PeerSpan& s) const {
    const PeerBuffers& p = peers[s.rank];
    return (s.buffer == PeerBufferKind::kSend ? p.sendbuf : p.recvbuf) + s.offset;
  }
  uint8_t* local(const PeerSpan& s) const { return reinterpret_cast<uint8_t*>(address(s)); }

  void read_peer(const PeerSpan& from, size_t at, void* out, size_t bytes) {
    std::string error =
        read_process_memory(pid_of_process_key(peers[from.rank].process), address(from) + at, out, bytes);
    if (!error.empty())
      fail(BAGUA_ERR_REMOTE, "{}: reading {} bytes of rank {}'s buffer failed: {}", name(), bytes, from.rank, error);
    schedule->add_direct_traffic(0, bytes);
  }
  void write_peer(const PeerSpan& to, size_t at, const void* in, size_t bytes) {
    std::string error = write_process_memory(pid_of_process_key(peers[to.rank].process), address(to) + at, in, bytes);
    if (!error.empty())
      fail(BAGUA_ERR_REMOTE, "{}: writing {} bytes into rank {}'s buffer failed: {}", name(), bytes, to.rank, error);
    schedule->add_direct_traffic(bytes, 0);
  }

  // A peer that failed may have returned already: stop writing into it soon after we hear.
  void every_few_segments(size_t& segments) {
    if (check_peers && ++segments % kSegmentsPerCheck == 0) check_peers();
  }

  void run_on_host() {
    size_t segments = 0;
    for (const PeerCopy& c : plan.copies) {
      if (c.to.rank != rank && c.from.rank != rank)
        fail(BAGUA_ERR_INTERNAL, "{}: a plan copies between two peers", name());
      for (size_t at = 0; at < c.bytes; at += kSegmentBytes) {
        every_few_segments(segments);
        const size_t bytes = std::min(kSegmentBytes, c.bytes - at);
        if (c.to.rank == rank && c.from.rank == rank) {
          if (local(c.to) != local(c.from)) std::memmove(local(c.to) + at, local(c.from) + at, bytes);
        } else if (c.to.rank == rank) {
          read_peer(c.from, at, local(c.to) + at, bytes);
        } else {
          write_peer(c.to, at, local(c.from) + at, bytes);
        }
      }
    }
    if (plan.reductions.empty()) return;
    const size_t elem = datatype_size(args.dtype), seg_elems = kSegmentBytes / elem;
    size_t most = 0;
    for (const PeerReduce& r : plan.reductions) most = std::max(most, r.count * elem);
    // A peer's piece, the first source when it is a peer's, and the result when it goes only to peers.
    std::shared_ptr<uint8_t[]> scratch = take_scratch(3 * std::min(kSegmentBytes, most));
    uint8_t* piece = scratch.get();
    uint8_t* first = piece + std::min(kSegmentBytes, most);
    uint8_t* remote_result = first + std::min(kSegmentBytes, most);
    for (const PeerReduce& r : plan.reductions) {
      const PeerSpan& result_span = r.destinations[0];
      for (size_t e = 0; e < r.count; e += seg_elems) {
        every_few_segments(segments);
        const size_t n = std::min(seg_elems, r.count - e), at = e * elem, bytes = n * elem;
        uint8_t* result = result_span.rank == rank ? local(result_span) + at : remote_result;
        const uint8_t* a = nullptr;
        if (r.sources[0].rank == rank) {
          a = local(r.sources[0]) + at;
        } else {
          read_peer(r.sources[0], at, first, bytes);
          a = first;
        }
        if (r.sources.size() == 1 && result != a) std::memmove(result, a, bytes);
        for (size_t k = 1; k < r.sources.size(); ++k) {
          const uint8_t* b = nullptr;
          if (r.sources[k].rank == rank) {
            b = local(r.sources[k]) + at;
          } else {
            read_peer(r.sources[k], at, piece, bytes);
            b = piece;
          }
          reduce_from(result, k == 1 ? a : result, b, n, args.dtype, args.op);
        }
        if (args.op == BAGUA_AVG) divide_by(result, n, args.dtype, nranks);
        for (size_t d = 0; d < r.destinations.size(); ++d) {
          const PeerSpan& to = r.destinations[d];
          if (to.rank != rank)
            write_peer(to, at, result, bytes);
          else if (local(to) + at != result)
            std::memcpy(local(to) + at, result, bytes);
        }
      }
    }
  }
};

}  // namespace

std::unique_ptr<Schedule> peer_memory_schedule(const CollectiveArgs& a, const ScheduleContext& ctx,
                                               PeerPlanBuilder plan, DeviceOperation* device) {
  auto s = std::make_unique<Schedule>(ctx);
  if (ctx.nranks == 1) {
    if (device != nullptr)
      fail(BAGUA_ERR_INTERNAL, "{}: one rank's device call on the in-host path", collective_name(a.collective));
    PeerCallFacts call{0, 1, a, {0}, {0}};
    const AlltoallLayout layout = alltoall_layout(a, 1);
    if (a.collective == Collective::kAlltoall || a.collective == Collective::kAlltoallv) {
      call.offset_for_me[0] = layout.send_off(0);
      call.bytes_for_me[0] = layout.send_bytes(0);
    }
    // One rank: every span is this rank's own, and the plan is local copies or one-source reductions.
    auto own = std::make_shared<PeerPlan>(plan(call));
    s->hold(own);
    s->prologue().push_back(call_step([own, a] {
      const size_t elem = datatype_size(a.dtype);
      auto at = [&a](const PeerSpan& sp) {
        return (sp.buffer == PeerBufferKind::kSend ? static_cast<uint8_t*>(const_cast<void*>(a.sendbuf))
                                                   : static_cast<uint8_t*>(a.recvbuf)) +
               sp.offset;
      };
      for (const PeerCopy& c : own->copies)
        if (at(c.to) != at(c.from)) std::memmove(at(c.to), at(c.from), c.bytes);
      for (const PeerReduce& r : own->reductions)
        for (const PeerSpan& d : r.destinations)
          if (at(d) != at(r.sources[0])) std::memmove(at(d), at(r.sources[0]), r.count * elem);
    }));
    return s;
  }
  auto w = std::make_shared<PeerMemoryWork>();
  w->schedule = s.get();
  w->args = a;
  w->alltoallv_counts = AlltoallvCounts(a, ctx.nranks);
  w->alltoallv_counts.point(w->args);
  w->build_plan = plan;
  w->rank = ctx.rank;
  w->nranks = ctx.nranks;
  PeerBuffers& mine = w->mine;
  mine.process = process_key();
  mine.sendbuf = reinterpret_cast<uintptr_t>(a.sendbuf);
  mine.recvbuf = reinterpret_cast<uintptr_t>(a.recvbuf);
  mine.send_extent = a.send_extent;
  mine.recv_extent = a.recv_extent;
  mine.count = a.collective == Collective::kAlltoallv ? 0 : a.count;
  mine.collective = static_cast<uint32_t>(a.collective);
  mine.dtype = static_cast<uint32_t>(a.dtype);
  mine.op = static_cast<uint32_t>(a.op);
  mine.root = a.root;
  if (a.send_extent == 0 && a.recv_extent == 0) mine.memory = kNoBuffers;
  if (device != nullptr) {
    w->device = device;
    describe_device_buffers(device->proxy().runtime(), a, &mine);
    // The input is ready (the operation is built once the stream has reached the call; on the caller's stream,
    // where it is built at the call, the hello waits for that instead): peers may read it from now on.
    order_with_peers();
  }
  const bool alltoall = a.collective == Collective::kAlltoall || a.collective == Collective::kAlltoallv;
  const AlltoallLayout layout = alltoall_layout(a, ctx.nranks);
  w->mine_for.assign(ctx.nranks, mine);
  for (int p = 0; p < ctx.nranks && alltoall; ++p) {
    w->mine_for[p].offset_for_you = layout.send_off(p);
    w->mine_for[p].bytes_for_you = layout.send_bytes(p);
    w->mine_for[p].bytes_from_you = layout.recv_bytes(p);
  }
  if (alltoall) {
    mine.offset_for_you = layout.send_off(ctx.rank);
    mine.bytes_for_you = layout.send_bytes(ctx.rank);
    mine.bytes_from_you = layout.recv_bytes(ctx.rank);
  }
  w->check_peers = ctx.check_peers;
  w->peers.resize(ctx.nranks);
  w->done_from.resize(ctx.nranks);
  s->hold(w);
  for (int i = 0; i < 4; ++i) s->round();
  Round& hello = s->rounds()[0];  // (round() may move earlier rounds: take the references after)
  Round& votes = s->rounds()[1];
  Round& addresses = s->rounds()[2];
  Round& bye = s->rounds()[3];
  for (int r = 0; r < ctx.nranks; ++r) {
    if (r == ctx.rank) continue;
    hello.recvs.push_back({r, &w->peers[r], sizeof(PeerBuffers)});
    hello.sends.push_back({r, &w->mine_for[r], sizeof(PeerBuffers)});
    bye.recvs.push_back({r, &w->done_from[r], 1});
    bye.sends.push_back({r, &w->done, 1});
  }
  if (device != nullptr && device->computes_on_caller_stream()) {
    w->prepare_on_stream(w);
    hello.ready = [device] {
      if (!device->phase_done(0)) return false;
      order_with_peers();  // the stream has reached the call: peers may read the input from now on
      return true;
    };
  }
  hello.after.push_back(call_step([work = w.get(), &votes] { work->propose(votes); }));
  votes.after.push_back(call_step([work = w.get(), &addresses] { work->decide(addresses); }));
  addresses.after.push_back(call_step([work = w.get()] { work->run_plan(); }));
  if (device != nullptr) {
    bye.ready = [work = w.get()] {
      if (work->on_ipc && !(work->on_stream ? work->device->phase_done(1) : work->device->work_done())) return false;
      order_with_peers();  // this rank's reads and writes of peers' buffers are done
      return true;
    };
    bye.after.push_back(call_step([] { order_with_peers(); }));  // and so are the peers' of this rank's
  }
  return s;
}

bool peer_memory_supports(int, const HostLayout& hosts) { return hosts.size() <= 1; }

size_t peer_memory_late_words(int nranks) { return 2 * static_cast<size_t>(nranks) + 2 * kMostStagingCopies; }

double peer_memory_cost(const CostTerms& t, double spans, double span_bytes, double reduced, double setup_us) {
  const double calls = spans * std::max(1.0, std::ceil(span_bytes / kSegmentBytes));
  return 2 * t.alpha + setup_us + 2 * (t.n - 1) * t.delta + calls * t.model.cross_memory_us +
         spans * span_bytes * t.beta * t.model.direct_move_factor + reduced * t.gamma;
}

}  // namespace bagua

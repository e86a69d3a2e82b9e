// Direct allreduce between the ranks of one host, by cross-memory attach (process_vm_readv/writev), or on device
// memory through CUDA IPC.
//
// Rank b owns block b. Round 0: every rank tells the others its pid, buffer addresses, count, datatype and
// op, and where its buffers live. Then each owner, segment by segment, reads that segment of its block from every
// peer into a small buffer, combines (own input first, then peers by ascending rank) into its own recvbuf, and
// writes the result straight into every peer's recvbuf. Last round: every rank tells the others it is done; after
// it, no peer reads or writes this rank's buffers any more.
//
// On device memory (docs/cuda.md), round 0 also carries each rank's IPC handles and GPU, so every rank takes the
// same decision from the same facts:
// - every rank on device memory that peers can map, on GPUs that can all reach each other: each rank maps its
//   peers' buffers (IpcCache) and says in round 1 whether that worked. If every rank did, each owner reduces its
//   block with device kernels in the same order, copies the result into every peer's recvbuf, and says it is done
//   only once that work has finished;
// - otherwise (a rank on host memory, a cudaMallocAsync buffer, GPUs without peer access, a failed mapping): ranks
//   on device memory copy their input to staging, round 2 tells the peers the staging addresses, the host
//   algorithm runs on them, and the output is copied back.
//
// Per rank, (n-1)/n of the vector N is read from peers and as much written into them; the ring with
// single-copy reads moves twice that, because each rank reads its result back from the owner. The segment
// buffer stays in cache. In place is safe: an owner reads a peer's input for its block before it writes
// that block. Before touching any peer, every rank checks that all agree on count, datatype and op (the
// messages of other algorithms get this from their sizes), so a mismatch is refused everywhere and nothing
// is written out of bounds.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>

#include <cstring>
#include <functional>
#include <memory>

#include "algorithms/patterns/ring.h"
#include "algorithms/registry.h"
#include "base/error.h"
#include "base/logging.h"
#include "base/scratch_cache.h"
#include "core/device_proxy.h"
#include "kernels/cpu/reduce.h"
#include "kernels/dtype.h"
#include "transport/cross_memory.h"

namespace bagua {

namespace {

enum : uint32_t { kHostMemory = 0, kDeviceMappable = 1, kDeviceStaged = 2 };
constexpr uint32_t kMostReachableGpus = 8;

struct PeerBuffers {
  uint64_t pid = 0;
  uint64_t sendbuf = 0;
  uint64_t recvbuf = 0;
  uint64_t count = 0;
  uint32_t dtype = 0;
  uint32_t op = 0;
  // Device calls only: where the buffers live and, when peers can map them, how.
  uint32_t memory = kHostMemory;
  uint32_t reachable_count = 0;
  GpuId gpu{};
  GpuId reachable[kMostReachableGpus]{};  // GPUs this rank's kernels can access, its own included
  uint64_t send_base = 0, send_buffer_id = 0, recv_base = 0, recv_buffer_id = 0;
  IpcHandle send_handle{}, recv_handle{};
};
static_assert(sizeof(PeerBuffers) == 352, "tests/mp/mp_allreduce.cc counts the bytes this message adds");

// Describes this rank's device buffers for its peers (round 0).
void describe_device_buffers(DeviceRuntime& runtime, const CollectiveArgs& a, PeerBuffers* mine) {
  mine->memory = kDeviceStaged;
  DeviceAllocation send, recv;
  if (!runtime.allocation(a.sendbuf, &send) || !runtime.allocation(a.recvbuf, &recv) || !send.exportable ||
      !recv.exportable)
    return;
  try {
    mine->gpu = runtime.gpu_id(a.device);
    std::vector<GpuId> reachable = runtime.reachable_gpus(a.device);
    mine->reachable_count = static_cast<uint32_t>(std::min<size_t>(reachable.size(), kMostReachableGpus));
    std::copy_n(reachable.begin(), mine->reachable_count, mine->reachable);
    runtime.export_ipc(send.base, &mine->send_handle);
    if (recv.base == send.base)
      mine->recv_handle = mine->send_handle;
    else
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

struct DirectWork {
  Schedule* schedule = nullptr;
  CollectiveArgs args;
  int rank = 0;
  int nranks = 0;
  PeerBuffers mine;
  std::vector<PeerBuffers> peers;  // [r]: rank r's, from round 0
  uint8_t done = 1;
  std::vector<uint8_t> done_from;
  std::shared_ptr<uint8_t[]> segment;  // one segment of a peer's input
  std::function<void()> check_peers;

  // Device calls: the device operation, the call on its staging memory, and what the ranks decided.
  DeviceOperation* device = nullptr;
  bool staging_asked = false;
  bool on_ipc = false;
  uint8_t mapped_ok = 1;
  std::vector<uint8_t> voted;                   // [r]: whether rank r mapped its peers (round 1)
  std::vector<std::shared_ptr<void>> mappings;  // peers' buffers, mapped until the call ends
  std::vector<const uint8_t*> in;               // [r]: rank r's input, here (IPC)
  std::vector<uint8_t*> out;                    // [r]: rank r's output, here

  static constexpr size_t kSegmentBytes = 256 << 10;
  static constexpr size_t kSegmentsPerCheck = 16;

  void check_agreement() const {
    for (int r = 0; r < nranks; ++r) {
      if (r == rank) continue;
      const PeerBuffers& p = peers[r];
      if (p.count != mine.count || p.dtype != mine.dtype || p.op != mine.op)
        fail(BAGUA_ERR_INVALID_USAGE, "rank {} called allreduce with {} x {} ({}), this rank with {} x {} ({})", r,
             p.count, datatype_name(static_cast<bagua_datatype_t>(p.dtype)),
             redop_name(static_cast<bagua_redop_t>(p.op)), mine.count, datatype_name(args.dtype), redop_name(args.op));
    }
  }

  // After round 0, the same on every rank: IPC is possible when every rank is on mappable device memory, every
  // rank's GPU can reach every other's, and ranks of one process share their GPU (they use each other's pointers,
  // without peer access). Then each rank maps its peers' buffers and votes in round 1 whether that worked.
  void propose(Round& votes) {
    if (device != nullptr) order_with_peers();
    check_agreement();
    peers[rank] = mine;
    on_ipc = true;
    for (int r = 0; r < nranks && on_ipc; ++r) {
      on_ipc = peers[r].memory == kDeviceMappable;
      for (int q = 0; q < nranks && on_ipc; ++q)
        on_ipc = reaches(peers[q], peers[r].gpu) && (peers[q].pid != peers[r].pid || peers[q].gpu == peers[r].gpu);
    }
    if (!on_ipc) return;
    try {
      map_peers();
    } catch (const Error& e) {
      static std::atomic<bool> warned{false};
      if (!warned.exchange(true))
        BAGUA_WARN(
            "direct allreduce: mapping the peers' device buffers through IPC failed, staging instead (said "
            "once per process): {}",
            e.what());
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

  // After round 1: through IPC if every rank mapped its peers; else ranks on device memory stage, and round 2 carries
  // their staging addresses. (Rounds 1 and 2 have room: they post at most what round 0 did.)
  void decide(Round& addresses) {
    for (int r = 0; r < nranks && on_ipc; ++r) on_ipc = (r == rank ? mapped_ok : voted[r]) != 0;
    if (device != nullptr) {
      device->proxy().count_direct_allreduce(on_ipc);
      BAGUA_DEBUG("direct allreduce of {} elements on device memory: {}", args.count,
                  on_ipc ? "through IPC"
                         : "staged (a rank is on host or unmappable memory, GPUs cannot reach each other, or a "
                           "mapping failed)");
    }
    if (on_ipc) return;
    mappings.clear();
    for (int r = 0; r < nranks; ++r)
      if (r != rank && peers[r].memory != kHostMemory) addresses.recvs.push_back({r, &peers[r], sizeof(PeerBuffers)});
    if (mine.memory == kHostMemory) return;
    for (int r = 0; r < nranks; ++r)
      if (r != rank) addresses.sends.push_back({r, &mine, sizeof(PeerBuffers)});
    // The staging addresses go out once the input is staged (the staging is leased now, without waiting).
    addresses.ready = [this] {
      if (!staging_asked) {
        if (!device->take_staging()) return false;
        staging_asked = true;
        args.sendbuf = device->staged_send();
        args.recvbuf = device->staged_recv();
        mine.sendbuf = reinterpret_cast<uintptr_t>(args.sendbuf);
        mine.recvbuf = reinterpret_cast<uintptr_t>(args.recvbuf);
        mine.memory = kHostMemory;
        device->stage_in();
        device->stage_out_at_end();
      }
      return device->staged_in();
    };
  }

  void run_block() {
    if (on_ipc)
      own_block_on_device();
    else
      own_block();
  }

  // Peer r's buffer at `address` in its process (allocation base, buffer id, handle): the pointer itself for a
  // thread of this process, else its IPC mapping here.
  uint8_t* peer_pointer(int r, uint64_t address, uint64_t base, uint64_t buffer_id, const IpcHandle& handle) {
    if (peers[r].pid == static_cast<uint64_t>(getpid())) return reinterpret_cast<uint8_t*>(address);
    std::shared_ptr<void> mapping = device->ipc_cache().map(peers[r].pid, base, buffer_id, handle, args.device);
    mappings.push_back(mapping);
    return static_cast<uint8_t*>(mapping.get()) + (address - base);
  }

  void map_peers() {
    in.assign(nranks, nullptr);
    out.assign(nranks, nullptr);
    for (int r = 0; r < nranks; ++r) {
      if (r == rank) {
        in[r] = static_cast<const uint8_t*>(args.sendbuf);
        out[r] = static_cast<uint8_t*>(args.recvbuf);
        continue;
      }
      const PeerBuffers& p = peers[r];
      in[r] = peer_pointer(r, p.sendbuf, p.send_base, p.send_buffer_id, p.send_handle);
      out[r] = peer_pointer(r, p.recvbuf, p.recv_base, p.recv_buffer_id, p.recv_handle);
    }
  }

  void own_block_on_device() {
    if (check_peers) check_peers();
    const size_t elem = datatype_size(args.dtype);
    const size_t begin = ring::chunk_begin(args.count, nranks, rank),
                 count = ring::chunk_size(args.count, nranks, rank);
    if (count == 0) return;
    const size_t at = begin * elem, bytes = count * elem;
    DeviceRuntime& runtime = device->proxy().runtime();
    device->issue_work([&](DeviceStream stream) {
      uint8_t* result = out[rank] + at;
      bool first = true;
      for (int r = 0; r < nranks; ++r) {
        if (r == rank) continue;
        runtime.reduce_async(result, first ? in[rank] + at : result, in[r] + at, count, args.dtype, args.op, stream);
        first = false;
      }
      if (args.op == BAGUA_AVG) runtime.divide_async(result, count, args.dtype, nranks, stream);
      for (int r = 0; r < nranks; ++r)
        if (r != rank) runtime.copy_async(out[r] + at, result, bytes, stream);
    });
    schedule->add_direct_traffic(bytes * (nranks - 1), bytes * (nranks - 1));
  }

  void own_block() {
    if (check_peers) check_peers();
    const size_t elem = datatype_size(args.dtype);
    const size_t begin = ring::chunk_begin(args.count, nranks, rank),
                 count = ring::chunk_size(args.count, nranks, rank);
    const size_t seg_elems = kSegmentBytes / elem;
    auto* out = static_cast<uint8_t*>(args.recvbuf);
    const auto* in = static_cast<const uint8_t*>(args.sendbuf);
    size_t segments = 0;
    for (size_t e = begin; e < begin + count; e += seg_elems) {
      // A peer that failed may have returned already: stop writing into it as soon as we hear.
      if (check_peers && ++segments % kSegmentsPerCheck == 0) check_peers();
      const size_t n = std::min(seg_elems, begin + count - e), bytes = n * elem, at = e * elem;
      bool first = true;
      for (int r = 0; r < nranks; ++r) {
        if (r == rank) continue;
        std::string error =
            read_process_memory(static_cast<pid_t>(peers[r].pid), peers[r].sendbuf + at, segment.get(), bytes);
        if (!error.empty()) fail(BAGUA_ERR_REMOTE, "reading {} bytes of rank {}'s input failed: {}", bytes, r, error);
        schedule->add_direct_traffic(0, bytes);
        reduce_from(out + at, first ? in + at : out + at, segment.get(), n, args.dtype, args.op);
        first = false;
      }
      if (args.op == BAGUA_AVG) divide_by(out + at, n, args.dtype, nranks);
      for (int r = 0; r < nranks; ++r) {
        if (r == rank) continue;
        std::string error =
            write_process_memory(static_cast<pid_t>(peers[r].pid), peers[r].recvbuf + at, out + at, bytes);
        if (!error.empty())
          fail(BAGUA_ERR_REMOTE, "writing {} bytes into rank {}'s output failed: {}", bytes, r, error);
        schedule->add_direct_traffic(bytes, 0);
      }
    }
  }
};

// device: the device operation of a call on device memory (a holds the device buffers).
std::unique_ptr<Schedule> direct_schedule(const CollectiveArgs& a, const ScheduleContext& ctx,
                                          DeviceOperation* device = nullptr) {
  auto s = std::make_unique<Schedule>(ctx);
  if (ctx.nranks == 1) {
    s->prologue().push_back(copy_step(a.recvbuf, a.sendbuf, a.count * datatype_size(a.dtype)));
    return s;
  }
  auto w = std::make_shared<DirectWork>();
  w->schedule = s.get();
  w->args = a;
  w->rank = ctx.rank;
  w->nranks = ctx.nranks;
  w->mine = PeerBuffers{};
  w->mine.pid = static_cast<uint64_t>(getpid());
  w->mine.sendbuf = reinterpret_cast<uintptr_t>(a.sendbuf);
  w->mine.recvbuf = reinterpret_cast<uintptr_t>(a.recvbuf);
  w->mine.count = a.count;
  w->mine.dtype = static_cast<uint32_t>(a.dtype);
  w->mine.op = static_cast<uint32_t>(a.op);
  if (device != nullptr) {
    w->device = device;
    describe_device_buffers(device->proxy().runtime(), a, &w->mine);
    order_with_peers();  // the input is ready (the operation is built after it): peers may read it from now on
  }
  w->check_peers = ctx.check_peers;
  w->peers.resize(ctx.nranks);
  w->done_from.resize(ctx.nranks);
  const size_t own_bytes = ring::chunk_size(a.count, ctx.nranks, ctx.rank) * datatype_size(a.dtype);
  w->segment = take_scratch(std::min(DirectWork::kSegmentBytes, own_bytes));
  s->hold(w);
  for (int i = 0; i < 4; ++i) s->round();
  Round& hello = s->rounds()[0];  // (round() may move earlier rounds: take the references after)
  Round& votes = s->rounds()[1];
  Round& addresses = s->rounds()[2];
  Round& bye = s->rounds()[3];
  for (int r = 0; r < ctx.nranks; ++r) {
    if (r == ctx.rank) continue;
    hello.recvs.push_back({r, &w->peers[r], sizeof(PeerBuffers)});
    hello.sends.push_back({r, &w->mine, sizeof(PeerBuffers)});
    bye.recvs.push_back({r, &w->done_from[r], 1});
    bye.sends.push_back({r, &w->done, 1});
  }
  hello.after.push_back(call_step([work = w.get(), &votes] { work->propose(votes); }));
  votes.after.push_back(call_step([work = w.get(), &addresses] { work->decide(addresses); }));
  addresses.after.push_back(call_step([work = w.get()] { work->run_block(); }));
  if (device != nullptr) {
    bye.ready = [work = w.get()] {
      if (work->on_ipc && !work->device->work_done()) return false;
      order_with_peers();  // this rank's reads and writes of peers' buffers are done
      return true;
    };
    bye.after.push_back(call_step([] { order_with_peers(); }));  // and so are the peers' of this rank's
  }
  return s;
}

std::unique_ptr<Schedule> allreduce_direct(const CollectiveArgs& a, const ScheduleContext& ctx) {
  return direct_schedule(a, ctx);
}

std::unique_ptr<Operation> allreduce_direct_on_device(const CollectiveArgs& args, DeviceOperation& device,
                                                      const ScheduleContext& ctx, std::string description) {
  return std::make_unique<ScheduleOp>(BAGUA_OPKIND_ALLREDUCE, std::move(description),
                                      direct_schedule(args, ctx, &device));
}

// Hello and done rounds (the votes and addresses rounds post nothing on host memory); per segment one read and one
// write per peer.
double cost(const CostTerms& t) {
  const CostModel& c = t.model;
  const double segments = std::max(1.0, std::ceil(t.m / t.n / (256.0 * 1024)));
  return 2 * t.alpha + 2 * (t.n - 1) * t.delta + 2 * segments * (t.n - 1) * c.cross_memory_us +
         2 * t.frac * t.m * t.beta * c.direct_move_factor + t.frac * t.m * t.gamma;
}

}  // namespace

// One host only, and only when every rank could attach to its peers' memory at init (also on device memory, where
// a call may fall back to staging).
extern const AlgorithmEntry kAllreduceDirect;
const AlgorithmEntry kAllreduceDirect{Collective::kAllreduce,
                                      "direct",
                                      [](int, const HostLayout& hosts) { return hosts.size() <= 1; },
                                      cost,
                                      run_schedule<allreduce_direct>,
                                      true,
                                      false,
                                      allreduce_direct_on_device};

}  // namespace bagua

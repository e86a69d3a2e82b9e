#include "algorithms/dispatch.h"

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <string>

#include "algorithms/argument_checks.h"
#include "algorithms/calibration.h"
#include "algorithms/p2p.h"
#include "algorithms/peer_memory/peer_memory.h"
#include "algorithms/registry.h"
#include "base/error.h"
#include "base/logging.h"
#include "core/device_proxy.h"
#include "core/tags.h"
#include "kernels/dtype.h"

namespace bagua {

namespace {

// How each collective's buffers are sized and checked: one row per collective (alltoallv and barrier aside).
struct BufferRule {
  enum class Blocks { kNone, kOne, kPerRank };  // count elements, or count x nranks
  enum class On { kAll, kRoot };                // which ranks pass the buffer
  enum class InPlace {
    kNever,       // overlap is an error
    kSame,        // sendbuf == recvbuf
    kSendInRecv,  // sendbuf == recvbuf + rank * block (allgather, gather)
    kRecvInSend,  // recvbuf == sendbuf + rank * block (reduce_scatter, scatter)
  };
  bool takes_op;
  bool rooted;
  const char* count_name;
  Blocks send;
  On send_on;
  Blocks recv;
  On recv_on;
  InPlace in_place;
};

using B = BufferRule::Blocks;
using On = BufferRule::On;
using IP = BufferRule::InPlace;
constexpr BufferRule kRules[] = {
    /* allreduce      */ {true, false, "count", B::kOne, On::kAll, B::kOne, On::kAll, IP::kSame},
    /* reduce_scatter */ {true, false, "recvcount", B::kPerRank, On::kAll, B::kOne, On::kAll, IP::kRecvInSend},
    /* allgather      */ {false, false, "sendcount", B::kOne, On::kAll, B::kPerRank, On::kAll, IP::kSendInRecv},
    /* broadcast      */ {false, true, "count", B::kOne, On::kRoot, B::kOne, On::kAll, IP::kSame},
    /* reduce         */ {true, true, "count", B::kOne, On::kAll, B::kOne, On::kRoot, IP::kSame},
    /* alltoall       */ {false, false, "count", B::kPerRank, On::kAll, B::kPerRank, On::kAll, IP::kNever},
    /* alltoallv      */ {false, false, "count", B::kNone, On::kAll, B::kNone, On::kAll, IP::kNever},
    /* gather         */ {false, true, "sendcount", B::kOne, On::kAll, B::kPerRank, On::kRoot, IP::kSendInRecv},
    /* scatter        */ {false, true, "recvcount", B::kPerRank, On::kRoot, B::kOne, On::kAll, IP::kRecvInSend},
    /* barrier        */ {false, false, "count", B::kNone, On::kAll, B::kNone, On::kAll, IP::kNever},
};
static_assert(sizeof(kRules) / sizeof(kRules[0]) == static_cast<size_t>(Collective::kCount));

const uint8_t* at(const void* p, size_t offset) { return static_cast<const uint8_t*>(p) + offset; }

void check_alltoallv(const Comm& comm, CollectiveArgs& a) {
  const int n = comm.size(), r = comm.rank();
  require_pointer(a.sendcounts, "sendcounts");
  require_pointer(a.sdispls, "sdispls");
  require_pointer(a.recvcounts, "recvcounts");
  require_pointer(a.rdispls, "rdispls");
  if (a.sendcounts[r] != a.recvcounts[r])
    fail(BAGUA_ERR_INVALID_ARGUMENT, "sendcounts[{}] = {} but recvcounts[{}] = {}: what a rank sends itself must fit",
         r, a.sendcounts[r], r, a.recvcounts[r]);
  size_t send_extent = 0, recv_extent = 0;
  for (int p = 0; p < n; ++p) {
    size_t s_end = checked_bytes(a.sdispls[p], a.dtype, "sdispls");
    size_t s_len = checked_bytes(a.sendcounts[p], a.dtype, "sendcounts");
    size_t r_end = checked_bytes(a.rdispls[p], a.dtype, "rdispls");
    size_t r_len = checked_bytes(a.recvcounts[p], a.dtype, "recvcounts");
    if (s_end > PTRDIFF_MAX - s_len || r_end > PTRDIFF_MAX - r_len)
      fail(BAGUA_ERR_INVALID_ARGUMENT, "displacement + count for peer {} overflows", p);
    if (s_len) send_extent = std::max(send_extent, s_end + s_len);
    if (r_len) recv_extent = std::max(recv_extent, r_end + r_len);
  }
  CallMemory memory;
  memory.add(a.sendbuf, send_extent, "sendbuf");
  memory.add(a.recvbuf, recv_extent, "recvbuf");
  if (overlap(a.sendbuf, send_extent, a.recvbuf, recv_extent))
    fail(BAGUA_ERR_INVALID_ARGUMENT, "alltoallv has no in-place form: sendbuf and recvbuf overlap");
  a.send_extent = send_extent;
  a.recv_extent = recv_extent;
  a.on_device = memory.on_device();
  a.device = memory.device();
}

}  // namespace

void check_collective_args(const Comm& comm, CollectiveArgs& a) {
  const BufferRule& rule = kRules[static_cast<int>(a.collective)];
  const int n = comm.size(), r = comm.rank();
  if (rule.takes_op)
    check_redop(a.op);
  else
    a.op = BAGUA_SUM;
  if (rule.rooted) check_rank(comm, a.root, "root");
  if (a.collective == Collective::kBarrier) return;
  if (a.collective == Collective::kAlltoallv) return check_alltoallv(comm, a);

  const size_t block = checked_bytes(a.count, a.dtype, rule.count_name);
  const bool per_rank = rule.send == B::kPerRank || rule.recv == B::kPerRank;
  const size_t all = per_rank ? checked_bytes(a.count, a.dtype, rule.count_name, n) : block;
  const size_t send_bytes = rule.send == B::kPerRank ? all : block;
  const size_t recv_bytes = rule.recv == B::kPerRank ? all : block;
  const bool has_send = rule.send_on == On::kAll || r == a.root;
  const bool has_recv = rule.recv_on == On::kAll || r == a.root;
  // The buffer every rank passes is checked first (which error wins when both are bad).
  CallMemory memory;
  if (rule.send_on == On::kRoot) {
    if (has_recv) memory.add(a.recvbuf, recv_bytes, "recvbuf");
    if (has_send) memory.add(a.sendbuf, send_bytes, "sendbuf");
  } else {
    if (has_send) memory.add(a.sendbuf, send_bytes, "sendbuf");
    if (has_recv) memory.add(a.recvbuf, recv_bytes, "recvbuf");
  }
  a.send_extent = has_send ? send_bytes : 0;
  a.recv_extent = has_recv ? recv_bytes : 0;
  a.on_device = memory.on_device();
  a.device = memory.device();
  if (!has_send || !has_recv || !overlap(a.sendbuf, send_bytes, a.recvbuf, recv_bytes)) return;
  switch (rule.in_place) {
    case IP::kNever:
      fail(BAGUA_ERR_INVALID_ARGUMENT, "{} has no in-place form: sendbuf and recvbuf overlap",
           collective_name(a.collective));
    case IP::kSame:
      if (a.sendbuf == a.recvbuf) return;
      break;
    case IP::kSendInRecv:
      if (a.sendbuf == at(a.recvbuf, r * block)) return;
      break;
    case IP::kRecvInSend:
      if (a.recvbuf == at(a.sendbuf, r * block)) return;
      fail(BAGUA_ERR_INVALID_ARGUMENT, "recvbuf overlaps sendbuf but is not sendbuf + {} * {} (in place)",
           rule.rooted ? "root" : "rank", rule.count_name);
  }
  fail(BAGUA_ERR_INVALID_ARGUMENT,
       "sendbuf and recvbuf overlap but are not in place (see the in-place rule of this call)");
}

RelaxationBuffers check_relaxation_buffers(const Comm& comm, const void* sendbuf, void* recvbuf, size_t count,
                                           bagua_datatype_t dtype) {
  CollectiveArgs args = args_of(Collective::kAllreduce, sendbuf, recvbuf, count, dtype);
  check_collective_args(comm, args);
  RelaxationBuffers b;
  b.sendbuf = sendbuf;
  b.recvbuf = recvbuf;
  b.bytes = args.recv_extent;
  b.on_device = args.on_device;
  b.device = args.device;
  return b;
}

CallDetails collective_details(const CollectiveArgs& args, const char* algorithm) {
  return {args.collective == Collective::kAlltoallv ? 0 : args.count,
          mix_details(static_cast<uint64_t>(args.root), hash_name(algorithm))};
}

ScheduleContext make_context(Comm& comm, TagKind kind, bagua_datatype_t dtype, bagua_redop_t op, CallDetails details) {
  const bool fingerprints = comm.config().fingerprints;
  ScheduleContext ctx{comm.rank(),
                      comm.size(),
                      fingerprints ? call_fingerprint(kind, dtype, op, details) : kind_only_fingerprint(kind),
                      fingerprints ? kTagFingerprintMask : 0,
                      comm.next_collective_sequence(),
                      kind,
                      dtype,
                      op,
                      comm.config().ring_segment_bytes,
                      comm.config().ring_window,
                      &comm.ring_order(),
                      &comm.hosts(),
                      [&comm] { comm.check_peers_now(); }};
  ctx.shared_segments = comm.shared_segments();
  return ctx;
}

namespace {

// Descriptions are made on every call, read only in errors, logs and traces: built by appending (fmt::format took
// a fifth of a 1 KiB alltoall's time on one rank).
void append_number(std::string& out, uint64_t value) {
  char digits[24];
  auto [end, error] = std::to_chars(digits, digits + sizeof digits, value);
  out.append(digits, end);
}

// "alltoall #7 (256 x float32, pairwise)", "barrier #3"
std::string describe_call(const CollectiveArgs& args, uint64_t sequence, const char* algorithm, const char* suffix) {
  std::string out;
  out.reserve(64);
  out += collective_name(args.collective);
  out += " #";
  append_number(out, sequence);
  if (args.collective != Collective::kBarrier) {
    out += " (";
    append_number(out, args.count);
    out += " x ";
    out += datatype_name(args.dtype);
    out += ", ";
    out += algorithm;
  }
  out += suffix;
  if (args.collective != Collective::kBarrier) out += ')';
  return out;
}

// "send #2 of 10 x int32 to rank 1", "receive #2 of 10 x int32 from rank 0"
std::string describe_point_to_point(bool send, uint64_t sequence, size_t count, bagua_datatype_t dtype, int peer) {
  std::string out;
  out.reserve(64);
  out += send ? "send #" : "receive #";
  append_number(out, sequence);
  out += " of ";
  append_number(out, count);
  out += " x ";
  out += datatype_name(dtype);
  out += send ? " to rank " : " from rank ";
  append_number(out, static_cast<uint64_t>(peer));
  return out;
}

// The context of a collective call, with its turn on the shared segments where its algorithm uses them (taken
// now, in call order, also for device calls whose schedule is built later).
ScheduleContext collective_context(Comm& comm, const CollectiveArgs& args, Algorithm algorithm) {
  ScheduleContext ctx =
      make_context(comm, tag_kind_of(args.collective), args.dtype, args.op, collective_details(args, algorithm->name));
  if (algorithm->uses_shared_segments && ctx.shared_segments != nullptr)
    ctx.shared_ticket = ctx.shared_segments->take_ticket();
  return ctx;
}

struct SelectorAttachment : CommAttachment {
  explicit SelectorAttachment(AlgorithmSelector s) : selector(std::move(s)) {}
  AlgorithmSelector selector;
};
}  // namespace

void check_algorithm_rules(const Config& config) { AlgorithmSelector(config.algo, config.inter_host_gbps); }

const AlgorithmSelector& selector_of(Comm& comm) {
  if (comm.attachment() == nullptr)
    comm.set_attachment(std::make_unique<SelectorAttachment>(
        AlgorithmSelector(comm.config().algo, comm.config().inter_host_gbps, comm.cross_memory())));
  return static_cast<SelectorAttachment*>(comm.attachment())->selector;
}

void prepare_selection(Comm& comm, Comm* parent) {
  selector_of(comm);
  AlgorithmSelector& selector = static_cast<SelectorAttachment*>(comm.attachment())->selector;
  selector.set_ranks_share_cores(comm.ranks_outnumber_cores());
  if (parent != nullptr && parent->size() == comm.size()) {  // (the same on every rank: all of them joined)
    selector.set_shared_copy_factor(selector_of(*parent).model().shared_copy_factor);
    BAGUA_DEBUG("shared-copy factor taken from the parent communicator (the same ranks)");
  } else {
    // Every rank sees the same times, so every rank decides the same.
    const std::vector<SharedCopyTimes> times = time_alltoall_copies(comm);
    if (!times.empty()) selector.set_shared_copy_factor(shared_copy_curve(times));
    for (const SharedCopyTimes& t : times)
      BAGUA_DEBUG(
          "alltoall of {} KiB blocks through shared segments took {:.2f}x the time of single-copy reads ({:.1f} "
          "against "
          "{:.1f} us): {}",
          t.block_bytes >> 10, t.factor(), t.shm_us, t.single_copy_us,
          measured_factor_decides(t.factor()) ? "the cost model uses that there"
                                              : "the cost model keeps its constant there");
  }
  for (int c = 0; c < static_cast<int>(Collective::kCount); ++c)
    for (size_t bytes = 0; bytes <= (size_t{64} << 20); bytes = bytes == 0 ? 1024 : bytes * 16)
      selector.choose(static_cast<Collective>(c), bytes, comm.size(), comm.hosts());
}

namespace {

std::unique_ptr<DeviceOperation> prepare_device_operation(Comm& comm, bagua_opkind_t kind, void* stream, int device,
                                                          size_t staging_bytes, StagingLease room = {}) {
  DeviceProxy& proxy = comm.device_proxy();
  proxy.check_stream(stream);
  proxy.open_requested_mappings();  // (this thread: what the in-host path asked for at earlier calls)
  // Room only: the block is allocated, or an idle one taken, when the operation starts (take_staging).
  if (room.data() != nullptr || room.bytes() < staging_bytes) room = proxy.lease(staging_bytes);
  return std::make_unique<DeviceOperation>(kind, proxy, stream, device, std::move(room));
}

// How a call's buffers sit in its staging: in place, the union of both; else the send buffer, then the receive one.
struct StagingLayout {
  const uint8_t* lo = nullptr;  // in place: the union's start, else nullptr
  size_t send_slot = 0;
  size_t bytes = 0;  // staging needed
};

StagingLayout staging_layout(const void* sendbuf, size_t se, const void* recvbuf, size_t re) {
  const auto* send = static_cast<const uint8_t*>(sendbuf);
  const auto* recv = static_cast<const uint8_t*>(recvbuf);
  StagingLayout l;
  if (overlap(send, se, recv, re)) {
    l.lo = std::min(send, recv);
    l.bytes = static_cast<size_t>(std::max(send + se, recv + re) - l.lo);
    return l;
  }
  l.send_slot = (se + 255) & ~size_t{255};
  l.bytes = l.send_slot + re;
  return l;
}

// Registers the copies of a call's buffers on op's staging and the staged buffers: input copied in once the stream
// reaches the call, output copied back when the host operation ends. In-place calls stage the union of both buffers,
// so the host operation sees the same in-place layout. copy_recv_in: the output buffer's old contents matter
// (alltoallv writes only its blocks).
void lay_out_staging(DeviceOperation& op, const StagingLayout& l, const void* sendbuf, size_t se, void* recvbuf,
                     size_t re, bool copy_recv_in) {
  const auto* send = static_cast<const uint8_t*>(sendbuf);
  auto* recv = static_cast<uint8_t*>(recvbuf);
  uint8_t* stage = op.staging();
  if (l.lo != nullptr) {
    op.copy_in(stage, l.lo, l.bytes);
    op.copy_out(recv, stage + (recv - l.lo), re);
    op.set_staged_buffers(stage + (send - l.lo), stage + (recv - l.lo));
    return;
  }
  if (se) op.copy_in(stage, send, se);
  if (re && copy_recv_in) op.copy_in(stage + l.send_slot, recv, re);
  if (re) op.copy_out(recv, stage + l.send_slot, re);
  op.set_staged_buffers(se ? stage : nullptr, re ? stage + l.send_slot : nullptr);
}

// A device operation whose staging holds the call's buffers once it starts (staged_send(), staged_recv()).
std::unique_ptr<DeviceOperation> stage_buffers(Comm& comm, bagua_opkind_t kind, void* stream, int device,
                                               const void* sendbuf, size_t send_extent, void* recvbuf,
                                               size_t recv_extent, bool copy_recv_in, size_t room_bytes = 0) {
  const StagingLayout layout = staging_layout(sendbuf, send_extent, recvbuf, recv_extent);
  std::unique_ptr<DeviceOperation> op =
      prepare_device_operation(comm, kind, stream, device, std::max(layout.bytes, room_bytes));
  op->lay_out_staging_at_start([=](DeviceOperation& self) {
    lay_out_staging(self, layout, sendbuf, send_extent, recvbuf, recv_extent, copy_recv_in);
  });
  return op;
}

// A call that an in-host device algorithm runs (AlgorithmEntry::build_on_device): staging is allocated and laid out
// only if the ranks decide to stage; its room under the limit is kept from the call on.
std::unique_ptr<Operation> make_device_collective_in_host(Comm& comm, const CollectiveArgs& args, Algorithm algorithm,
                                                          const char* suffix) {
  DeviceProxy& proxy = comm.device_proxy();
  proxy.check_stream(args.stream);
  const StagingLayout layout = staging_layout(args.sendbuf, args.send_extent, args.recvbuf, args.recv_extent);
  // Room for the staging, kept in call order as every call's staging is; allocated only if the ranks stage.
  auto op = std::make_unique<DeviceOperation>(opkind_of(args.collective), proxy, args.stream, args.device,
                                              proxy.lease(layout.bytes));
  op->set_algorithm(collective_name(args.collective), algorithm->name);
  op->defer_staging([layout, args](DeviceOperation& self) {
    lay_out_staging(self, layout, args.sendbuf, args.send_extent, args.recvbuf, args.recv_extent,
                    args.collective == Collective::kAlltoallv);
  });
  // Nothing can fail from here on: the sequence number is taken. (Gating the stream is the submitter's.)
  ScheduleContext ctx = collective_context(comm, args, algorithm);
  std::string description = fmt::format("{} #{} ({} x {}, {}, device{})", collective_name(args.collective),
                                        ctx.sequence, args.count, datatype_name(args.dtype), algorithm->name, suffix);
  DeviceOperation* device = op.get();
  op->set_host_operation(
      [algorithm, call = args, ctx, description, device, counts = AlltoallvCounts(args, comm.size())]() mutable {
        counts.point(call);
        return algorithm->build_on_device(call, *device, ctx, description);
      },
      description);
  return op;
}

// Whether an in-host device algorithm's call can run on the caller's stream (BAGUA_DEVICE_DATA_PATH=stream): a
// blocking call (outside a group, or in a group whose end may take that form) whose stream is on its buffers' device,
// of a collective whose plan this rank knows at the call (alltoall(v)'s depends on what the peers send). The others
// stage, and run the host algorithm.
bool in_host_on_caller_stream(Comm& comm, const CollectiveArgs& args) {
  return (args.phases_allowed || args.in_group) && args.collective != Collective::kAlltoall &&
         args.collective != Collective::kAlltoallv &&
         comm.device_proxy().runtime().stream_device(args.stream) == args.device;
}

// That call (docs/cuda.md, "The IPC path on the caller's stream"): its plan's kernels on the caller's stream, and its
// staging taken now, laid out for the fallback; the ranks decide between them while the stream runs up to the call.
// The staging it takes: the call's buffers, then (8-aligned, at late_words_at) the late words.
size_t late_words_at(const StagingLayout& layout) { return (layout.bytes + 7) & ~size_t{7}; }
size_t in_host_on_stream_bytes(const Comm& comm, const StagingLayout& layout) {
  return late_words_at(layout) + peer_memory_late_words(comm.size()) * sizeof(uint64_t);
}

// taken, room: the sequence number and the room under the memory limit that a group's staged form of the call took.
std::unique_ptr<DeviceOperation> make_device_collective_in_host_on_stream(Comm& comm, const CollectiveArgs& args,
                                                                          Algorithm algorithm, const char* suffix,
                                                                          const ScheduleContext* taken = nullptr,
                                                                          StagingLease room = {}) {
  const StagingLayout layout = staging_layout(args.sendbuf, args.send_extent, args.recvbuf, args.recv_extent);
  std::unique_ptr<DeviceOperation> op =
      prepare_device_operation(comm, opkind_of(args.collective), args.stream, args.device,
                               in_host_on_stream_bytes(comm, layout), std::move(room));
  op->compute_on_caller_stream(0);
  op->set_late_words_at(late_words_at(layout));
  op->set_algorithm(collective_name(args.collective), algorithm->name);
  // The sequence number is taken: what fails from here on (the staging block, the plan, an enqueue: in the
  // submitter) fails the communicator.
  ScheduleContext ctx = taken ? *taken : collective_context(comm, args, algorithm);
  std::string description =
      fmt::format("{} #{} ({} x {}, {}, device{}, on the caller's stream)", collective_name(args.collective),
                  ctx.sequence, args.count, datatype_name(args.dtype), algorithm->name, suffix);
  // Built at the call, on the staging the call takes (enqueue_input_on_caller_stream); handed over when it starts.
  auto built = std::make_shared<std::unique_ptr<Operation>>();
  op->lay_out_staging_at_start([layout, args, algorithm, ctx, description, built](DeviceOperation& self) {
    lay_out_staging(self, layout, args.sendbuf, args.send_extent, args.recvbuf, args.recv_extent, false);
    *built = algorithm->build_on_device(args, self, ctx, description);
  });
  op->set_host_operation([built] { return std::move(*built); }, description);
  return op;
}

// The collective on staging memory. taken_out: the context (sequence number) it took. room_bytes: room under the
// memory limit to take at least (for the form that may replace it).
std::unique_ptr<DeviceOperation> make_device_collective(Comm& comm, const CollectiveArgs& args, Algorithm algorithm,
                                                        const char* suffix, ScheduleContext* taken_out = nullptr,
                                                        size_t room_bytes = 0) {
  std::unique_ptr<DeviceOperation> op =
      stage_buffers(comm, opkind_of(args.collective), args.stream, args.device, args.sendbuf, args.send_extent,
                    args.recvbuf, args.recv_extent, args.collective == Collective::kAlltoallv, room_bytes);
  op->set_algorithm(collective_name(args.collective), algorithm->name);  // the operation the engine retires
  op->allow_pipelined_staging();
  CollectiveArgs host = args;
  host.on_device = false;
  host.stream = nullptr;
  // Nothing can fail from here on: the sequence number is taken. (Gating the stream is the submitter's.)
  ScheduleContext ctx = collective_context(comm, args, algorithm);
  if (taken_out) *taken_out = ctx;
  std::string description = fmt::format("{} #{} ({} x {}, {}, device{})", collective_name(args.collective),
                                        ctx.sequence, args.count, datatype_name(args.dtype), algorithm->name, suffix);
  op->set_host_operation(
      [algorithm, host, ctx, description, device = op.get(), counts = AlltoallvCounts(args, comm.size())]() mutable {
        host.sendbuf = device->staged_send();
        host.recvbuf = device->staged_recv();
        counts.point(host);
        return algorithm->build(host, ctx, description);
      },
      description);
  return op;
}

}  // namespace

std::unique_ptr<Operation> make_collective(Comm& comm, CollectiveArgs args, const char* suffix) {
  check_collective_args(comm, args);
  comm.check_usable();
  const int n = comm.size();
  // The choice never depends on where the buffers live, so ranks with host and device buffers agree on it.
  Algorithm algorithm = args.algorithm
                            ? find_algorithm(args.collective, args.algorithm)
                            : selector_of(comm).choose(args.collective, args.message_bytes(n), n, comm.hosts());
  if (algorithm == nullptr || !algorithm_supports(algorithm, n, comm.hosts()))
    fail(BAGUA_ERR_INTERNAL, "no {} algorithm '{}' for {} ranks", collective_name(args.collective),
         algorithm ? algorithm->name : args.algorithm, n);
  if (Logger::instance().enabled(LogLevel::kDebug))
    BAGUA_DEBUG("{}: {} bytes, {} ranks on {} hosts: {} ({})", collective_name(args.collective), args.message_bytes(n),
                n, comm.nhosts(), algorithm->name,
                args.algorithm ? std::string("the caller's choice")
                               : selector_of(comm).explain(args.collective, args.message_bytes(n), n, comm.hosts()));
  if (args.on_device) {
    // (With BAGUA_DEVICE_DATA_PATH=stream the in-host algorithms run on the caller's stream where they can, and
    // otherwise on staging, as a host rank's would.)
    const bool in_host = algorithm->build_on_device != nullptr && comm.nhosts() <= 1 && n > 1;
    if (in_host && !comm.config().device_path_on_stream)
      return make_device_collective_in_host(comm, args, algorithm, suffix);
    if (in_host && in_host_on_caller_stream(comm, args)) {
      if (args.phases_allowed) return make_device_collective_in_host_on_stream(comm, args, algorithm, suffix);
      // In a group: staged, and the caller's-stream form kept for the group's end, which hands it this call's
      // sequence number and room (taken for the larger of the two).
      ScheduleContext ctx{};
      const StagingLayout layout = staging_layout(args.sendbuf, args.send_extent, args.recvbuf, args.recv_extent);
      std::unique_ptr<DeviceOperation> op =
          make_device_collective(comm, args, algorithm, suffix, &ctx, in_host_on_stream_bytes(comm, layout));
      CollectiveArgs alone = args;
      alone.phases_allowed = true;
      alone.in_group = false;
      op->set_caller_stream_alternative([&comm, alone, algorithm, suffix, ctx](StagingLease room) {
        return make_device_collective_in_host_on_stream(comm, alone, algorithm, suffix, &ctx, std::move(room));
      });
      return op;
    }
    return make_device_collective(comm, args, algorithm, suffix);
  }
  ScheduleContext ctx = collective_context(comm, args, algorithm);
  // The sequence number (and a shared-memory turn) is taken: a failure from here on also leaves the turn never
  // passed on.
  return after_sequence_taken(comm, collective_name(args.collective), [&] {
    std::string description = describe_call(args, ctx.sequence, algorithm->name, suffix);
    BAGUA_TRACE("posting {}", description);
    std::unique_ptr<Operation> op = algorithm->build(args, ctx, std::move(description));
    op->set_algorithm(collective_name(args.collective), algorithm->name);
    return op;
  });
}

void fail_out_of_step(Comm& comm, const char* what) {
  try {
    throw;
  } catch (const Error& e) {
    comm.fail_now(e.status(), e.what());
  } catch (const std::bad_alloc&) {
    comm.fail_now(BAGUA_ERR_SYSTEM, fmt::format("out of memory setting up {}", what));
  } catch (const std::exception& e) {
    comm.fail_now(BAGUA_ERR_INTERNAL, fmt::format("setting up {}: {}", what, e.what()));
  } catch (...) {
    comm.fail_now(BAGUA_ERR_INTERNAL, fmt::format("setting up {}: unknown exception", what));
  }
}

std::unique_ptr<Operation> make_device_relaxation(Comm& comm, bagua_opkind_t kind, const RelaxationBuffers& buffers,
                                                  void* stream, TagKind tag_kind, bagua_datatype_t dtype,
                                                  bagua_redop_t op, CallDetails details, const char* name,
                                                  RelaxationBuilder build) {
  std::unique_ptr<DeviceOperation> staged = stage_buffers(comm, kind, stream, buffers.device, buffers.sendbuf,
                                                          buffers.bytes, buffers.recvbuf, buffers.bytes, false);
  // The sequence number is taken in call order, after everything that may refuse the call.
  ScheduleContext ctx = make_context(comm, tag_kind, dtype, op, details);
  return after_sequence_taken(comm, name, [&]() -> std::unique_ptr<Operation> {
    std::string description = fmt::format("{} #{} ({} bytes, device)", name, ctx.sequence, buffers.bytes);
    staged->set_host_operation([build = std::move(build), device = staged.get(),
                                ctx] { return build(device->staged_send(), device->staged_recv(), ctx); },
                               description);
    return std::move(staged);
  });
}

std::unique_ptr<Operation> make_device_computed_relaxation(
    Comm& comm, bagua_opkind_t kind, const RelaxationBuffers& buffers, void* stream, size_t staging_bytes,
    size_t device_scratch_bytes, bool on_caller_stream, TagKind tag_kind, bagua_datatype_t dtype, bagua_redop_t op,
    CallDetails details, const char* name, DeviceRelaxationBuilder build) {
  // Timed (BAGUA_DEVICE_TIMING=1): the phases' timestamps after the staging the call asked for.
  const bool timed = on_caller_stream && comm.config().device_timing;
  const size_t timestamps_at = (staging_bytes + 7) & ~size_t{7};
  std::unique_ptr<DeviceOperation> device_op = prepare_device_operation(
      comm, kind, stream, buffers.device, timed ? timestamps_at + DeviceOperation::kTimestampBytes : staging_bytes);
  if (on_caller_stream)
    device_op->compute_on_caller_stream(device_scratch_bytes, timed ? timestamps_at : DeviceOperation::kNoTimestamps);
  else
    device_op->take_device_scratch(device_scratch_bytes);
  // The sequence number is taken in call order, after everything that may refuse the call.
  ScheduleContext ctx = make_context(comm, tag_kind, dtype, op, details);
  return after_sequence_taken(comm, name, [&]() -> std::unique_ptr<Operation> {
    std::string description = fmt::format("{} #{} ({} bytes, device, compressed on the device{})", name, ctx.sequence,
                                          buffers.bytes, on_caller_stream ? ", on the caller's stream" : "");
    auto builder = std::make_shared<DeviceRelaxationBuilder>(std::move(build));
    if (!on_caller_stream) {
      DeviceOperation* self = device_op.get();
      device_op->set_host_operation([builder, self, ctx] { return (*builder)(*self, ctx); }, description);
      return std::move(device_op);
    }
    // Built at the call, on the staging the call takes (enqueue_input_on_caller_stream); handed over when it starts.
    auto built = std::make_shared<std::unique_ptr<Operation>>();
    device_op->lay_out_staging_at_start(
        [builder, built, ctx](DeviceOperation& self) { *built = (*builder)(self, ctx); });
    device_op->set_host_operation([builder, built] { return std::move(*built); }, description);
    return std::move(device_op);
  });
}

namespace {

// Point to point on either memory: the checks, then on device memory the staging (copied in for a send, out for a
// receive), then the sequence number of the ordered pair.
template <bool kSend>
std::unique_ptr<Operation> make_p2p(Comm& comm, void* buf, size_t count, bagua_datatype_t dtype, int peer,
                                    void* stream) {
  size_t bytes = checked_bytes(count, dtype, "count");
  CallMemory memory;
  memory.add(buf, bytes, "buf");
  check_rank(comm, peer, "peer");
  comm.check_usable();
  std::unique_ptr<DeviceOperation> device_op;
  if (memory.on_device()) {
    device_op =
        prepare_device_operation(comm, kSend ? BAGUA_OPKIND_SEND : BAGUA_OPKIND_RECV, stream, memory.device(), bytes);
    device_op->lay_out_staging_at_start([buf, bytes](DeviceOperation& self) {
      if constexpr (kSend)
        self.copy_in(self.staging(), buf, bytes);
      else
        self.copy_out(buf, self.staging(), bytes);
      self.set_staged_buffers(self.staging(), self.staging());
    });
  }
  uint64_t seq = kSend ? comm.next_send_sequence(peer) : comm.next_recv_sequence(peer);
  const bool fingerprints = comm.config().fingerprints;
  const uint64_t fingerprint = fingerprints ? call_fingerprint(TagKind::kP2P, dtype, BAGUA_SUM, {count, 0})
                                            : kind_only_fingerprint(TagKind::kP2P);
  const uint64_t unmatched_bits = fingerprints ? kTagFingerprintMask : 0;
  uint64_t tag = make_tag(fingerprint, seq, 0, kSend ? comm.rank() : peer);
  std::string description = describe_point_to_point(kSend, seq, count, dtype, peer);
  auto build = [=, device = device_op.get()]() -> std::unique_ptr<Operation> {
    void* buf_now = device ? device->staged_recv() : buf;  // on device memory: the staging
    if constexpr (kSend)
      return std::make_unique<SendOp>(buf_now, bytes, peer, tag, description);
    else
      return std::make_unique<RecvOp>(buf_now, bytes, peer, tag, unmatched_bits, description);
  };
  if (!device_op) return build();
  device_op->set_host_operation(build, description + " on device");
  return device_op;
}

}  // namespace

std::unique_ptr<Operation> make_send(Comm& comm, const void* buf, size_t count, bagua_datatype_t dtype, int peer,
                                     void* stream) {
  return make_p2p<true>(comm, const_cast<void*>(buf), count, dtype, peer, stream);  // a send only reads buf
}

std::unique_ptr<Operation> make_recv(Comm& comm, void* buf, size_t count, bagua_datatype_t dtype, int peer,
                                     void* stream) {
  return make_p2p<false>(comm, buf, count, dtype, peer, stream);
}

void run_to_completion(Comm& comm, Operation& op) {
  struct Release {
    Comm& comm;
    Operation& op;
    ~Release() { comm.forget(op); }
  } release{comm, op};
  comm.start(op);
  comm.wait(op);
}

void allreduce_now(Comm& comm, const void* sendbuf, void* recvbuf, size_t count, bagua_datatype_t dtype,
                   bagua_redop_t op) {
  auto operation =
      make_collective(comm, args_of(Collective::kAllreduce, sendbuf, recvbuf, count, dtype, op), ", internal");
  run_to_completion(comm, *operation);
}

}  // namespace bagua

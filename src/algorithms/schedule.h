// A collective as a list of rounds. In each round every receive and send is posted at once; when all are
// done, the round's local steps run in order (reductions, copies). Builders (one file per algorithm, under
// src/algorithms/<collective>/) emit rounds; ScheduleOp runs them. Rank arithmetic stays in patterns/.
//
// Tags: the step field carries (round << 6 | k) where k counts the messages between the same two ranks in
// that round, in the order the builder emits them on both sides (at most 64). Rounds run one after another,
// so the round number may wrap.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "algorithms/staged_steps.h"
#include "core/operation.h"
#include "core/tags.h"
#include "transport/shared_segments.h"

namespace bagua {

struct SendSpec {
  int peer;
  const void* data;
  size_t bytes;
  SendMode mode = SendMode::kDefault;
};

struct RecvSpec {
  int peer;
  void* data;
  size_t bytes;
};

// Large messages as up to 32 pieces of at least 512 KiB, all posted at once: over TCP the transport streams
// pieces back to back, where one large rendezvous ran at about half the link rate on the test bed.
constexpr size_t kPieceMinBytes = 512 << 10;
constexpr size_t kMaxPieces = 32;
inline size_t piece_bytes(size_t bytes) {
  size_t pieces = bytes / kPieceMinBytes;
  pieces = pieces < 1 ? 1 : (pieces > kMaxPieces ? kMaxPieces : pieces);
  return (bytes + pieces - 1) / pieces;
}
inline void add_send_pieces(std::vector<SendSpec>& sends, int peer, const void* data, size_t bytes) {
  const size_t piece = piece_bytes(bytes);
  for (size_t off = 0; off < bytes; off += piece)
    sends.push_back({peer, static_cast<const uint8_t*>(data) + off, bytes - off < piece ? bytes - off : piece});
}
inline void add_recv_pieces(std::vector<RecvSpec>& recvs, int peer, void* data, size_t bytes) {
  const size_t piece = piece_bytes(bytes);
  for (size_t off = 0; off < bytes; off += piece)
    recvs.push_back({peer, static_cast<uint8_t*>(data) + off, bytes - off < piece ? bytes - off : piece});
}

struct LocalStep {
  enum class Kind { kCopy, kReduce, kDivide, kCall } kind;
  void* dst;
  const void* a;  // kCopy: source. kReduce: dst = a op b (a, b may alias dst)
  const void* b;
  size_t count;                     // elements (kReduce, kDivide) or bytes (kCopy)
  std::function<void()> call = {};  // kCall: compression, decompression and other algorithm-specific work
};

inline LocalStep copy_step(void* dst, const void* src, size_t bytes) {
  return {LocalStep::Kind::kCopy, dst, src, nullptr, bytes};
}
inline LocalStep reduce_step(void* dst, const void* a, const void* b, size_t count) {
  return {LocalStep::Kind::kReduce, dst, a, b, count};
}
inline LocalStep call_step(std::function<void()> fn) {
  return {LocalStep::Kind::kCall, nullptr, nullptr, nullptr, 0, std::move(fn)};
}
inline LocalStep divide_step(void* dst, size_t count) {
  return {LocalStep::Kind::kDivide, dst, nullptr, nullptr, count};
}

// A finished schedule's rounds are kept, emptied, for the next schedules built on the same thread (their vectors
// keep their storage): a field added here must also be emptied in Schedule::~Schedule.
struct Round {
  std::vector<RecvSpec> recvs;
  std::vector<SendSpec> sends;
  // Run once the round's transfers are posted, while they are in flight (so they must not touch those
  // buffers): compression of what the next round sends, decompression of what the last one received.
  std::vector<LocalStep> during;
  std::vector<LocalStep> after;
  // When set, the round is posted only once this returns true (device work it depends on has finished); asked
  // again on every advance.
  std::function<bool()> ready;
};

// For long local work that overlaps transfers: advances them between pieces of the work. The operation
// running the work installs what that means with a ProgressHook; without one it does nothing.
void progress_in_flight();
class ProgressHook {
 public:
  explicit ProgressHook(const std::function<void()>& hook);  // hook must outlive this object
  explicit ProgressHook(std::function<void()>&&) = delete;
  ~ProgressHook();
  ProgressHook(const ProgressHook&) = delete;
  ProgressHook& operator=(const ProgressHook&) = delete;

 private:
  const std::function<void()>* previous_;
};

// What every schedule needs to know to post and reduce.
struct ScheduleContext {
  int rank;
  int nranks;
  uint64_t fingerprint;     // of the call, in every tag (core/tags.h)
  uint64_t unmatched_bits;  // kTagFingerprintMask, or 0 with BAGUA_FINGERPRINT=0
  uint64_t sequence;
  TagKind kind;
  bagua_datatype_t dtype;
  bagua_redop_t op;
  size_t ring_segment_bytes = 512 << 10;
  int ring_window = 4;
  // Rings visit ranks in this order (ranks of a host next to each other); empty means 0..n-1. The communicator's
  // own list, which outlives its calls (a copy per call cost allocations on every call's path).
  const std::vector<int>* ring_order_list = nullptr;
  // Ranks of each host (hierarchical algorithms); empty means one host. The communicator's, as above.
  const std::vector<std::vector<int>>* host_lists = nullptr;
  // For local steps that write into peers' memory: throws when the communicator has failed or been aborted,
  // after taking in the bootstrap ring's failure notices. Empty: no check.
  std::function<void()> check_peers;
  // Shared memory between the ranks of a one-host communicator, when it has it (else nullptr), and this call's
  // turn to use it (taken in call order for algorithms that use it).
  SharedSegments* shared_segments = nullptr;
  uint64_t shared_ticket = 0;
  const std::vector<int>& ring_order() const {
    static const std::vector<int> none;
    return ring_order_list ? *ring_order_list : none;
  }
  const std::vector<std::vector<int>>& hosts() const {
    static const std::vector<std::vector<int>> none;
    return host_lists ? *host_lists : none;
  }
  int ring_position() const { return ring_order().empty() ? rank : position_of(rank); }
  int ring_rank(int position) const { return ring_order().empty() ? position : ring_order()[position]; }
  int ring_next() const { return ring_rank((ring_position() + 1) % nranks); }
  int ring_prev() const { return ring_rank((ring_position() + nranks - 1) % nranks); }
  int position_of(int r) const {
    const std::vector<int>& order = ring_order();
    for (int p = 0; p < static_cast<int>(order.size()); ++p)
      if (order[p] == r) return p;
    return r;
  }
};

class Schedule {
 public:
  explicit Schedule(const ScheduleContext& ctx);
  ~Schedule();
  Schedule(const Schedule&) = delete;
  Schedule& operator=(const Schedule&) = delete;
  Round& round();
  Round& last() { return rounds_.back(); }
  bool empty() const { return rounds_.empty(); }
  // Scratch memory owned by the schedule (uninitialized).
  uint8_t* scratch(size_t bytes);
  // Keeps an object alive as long as the schedule (state the local steps use; a release on destruction).
  void hold(std::shared_ptr<void> object) { held_.push_back(std::move(object)); }
  const ScheduleContext& context() const { return ctx_; }
  std::vector<Round>& rounds() { return rounds_; }
  // Local steps that run before the first round (e.g. out-of-place copies).
  std::vector<LocalStep>& prologue() { return prologue_; }
  // When set, the operation starts (runs its prologue) only once this returns true; it is asked again on every
  // advance. For a resource that one operation at a time may use.
  std::function<bool()>& start_gate() { return start_gate_; }
  // A local step that runs after everything added so far.
  void then(const LocalStep& step) {
    if (rounds_.empty())
      prologue_.push_back(step);
    else
      rounds_.back().after.push_back(step);
  }
  // Bytes a local step moved to or from peers outside the transport (cross-memory attach), added to the
  // communicator's byte counters (not its message counters).
  void add_direct_traffic(uint64_t sent, uint64_t received) {
    direct_sent_ += sent;
    direct_received_ += received;
  }
  std::pair<uint64_t, uint64_t> take_direct_traffic() {
    auto out = std::make_pair(direct_sent_, direct_received_);
    direct_sent_ = direct_received_ = 0;
    return out;
  }

 private:
  ScheduleContext ctx_;
  std::vector<Round> rounds_;
  std::vector<LocalStep> prologue_;
  std::function<bool()> start_gate_;
  std::vector<std::shared_ptr<uint8_t[]>> scratch_;  // from take_scratch
  std::vector<std::shared_ptr<void>> held_;
  uint64_t direct_sent_ = 0;
  uint64_t direct_received_ = 0;
};

class ScheduleOp : public Operation {
 public:
  ScheduleOp(bagua_opkind_t kind, std::string description, std::unique_ptr<Schedule> schedule);
  void advance(Transport& transport) override;
  // Before its start gate opens it waits for an earlier operation, which the watchdog watches instead.
  bool watched() const override { return started_ || !schedule_->start_gate(); }
  std::string waiting_for() const override;
  // Steps: the prologue, then each round (its transfers and local steps). Not with opaque calls: one may hand
  // staging to peers outside the transport (cross-memory attach), whose reads no arrival check covers.
  bool pipelines_staging() const override { return !has_calls_; }

 private:
  void post_round(Transport& transport);
  void run_steps(const std::vector<LocalStep>& steps, Transport& transport);
  void plan_staging(StagingWindow& window);

  std::unique_ptr<Schedule> schedule_;
  std::unique_ptr<StagedSteps> staged_;  // on a device call's pipelined staging
  bool has_calls_ = false;
  bool planned_ = false;
  bool awaiting_input_ = false;
  size_t round_ = 0;
  bool posted_ = false;
  bool started_ = false;
  std::vector<Transfer> transfers_;  // of the current round; sized before posting, never reallocated while live
};

}  // namespace bagua

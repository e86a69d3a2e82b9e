#include "algorithms/schedule.h"

#include <algorithm>
#include <cstring>

#include "base/error.h"
#include "base/scratch_cache.h"
#include "kernels/cpu/reduce.h"
#include "kernels/dtype.h"

namespace bagua {

namespace {

// Rounds, and lists of rounds, of this thread's finished schedules, emptied but with their storage: building the next
// schedule allocates nothing for them (a two-rank alltoall made about ten allocations per call, four of them here).
// The pool's storage is reserved by the first Schedule built on a thread (which may throw); ~Schedule returns rounds
// only within that capacity, and only on a thread whose pool is ready, so it never allocates (a schedule may end on
// another thread than the one that built it). A round whose lists grew past kMostSteps (a wide communicator's
// round) is freed rather than kept.
struct SpareRounds {
  static constexpr size_t kMostRounds = 64;
  static constexpr size_t kMostLists = 4;
  static constexpr size_t kMostSteps = 256;
  std::vector<Round> rounds;
  std::vector<std::vector<Round>> lists;
  ~SpareRounds();
  static bool worth_keeping(const Round& r) {
    return std::max({r.recvs.capacity(), r.sends.capacity(), r.during.capacity(), r.after.capacity()}) <= kMostSteps;
  }
};
// Both flags are trivially destructible: readable until the thread ends.
thread_local bool t_spare_ready = false;  // this thread's pool has its storage
thread_local bool t_spare_gone = false;   // and has been destroyed (the thread is ending)
thread_local SpareRounds t_spare;
SpareRounds::~SpareRounds() { t_spare_gone = true; }

}  // namespace

Schedule::Schedule(const ScheduleContext& ctx) : ctx_(ctx) {
  if (t_spare_gone) return;
  if (!t_spare_ready) {
    t_spare.rounds.reserve(SpareRounds::kMostRounds);
    t_spare.lists.reserve(SpareRounds::kMostLists);
    t_spare_ready = true;
  }
  if (!t_spare.lists.empty()) {
    rounds_ = std::move(t_spare.lists.back());
    t_spare.lists.pop_back();
  }
}

Schedule::~Schedule() {
  if (!t_spare_ready || t_spare_gone) return;
  for (Round& r : rounds_) {
    if (t_spare.rounds.size() >= t_spare.rounds.capacity()) break;
    if (!SpareRounds::worth_keeping(r)) continue;
    r.recvs.clear();
    r.sends.clear();
    r.during.clear();
    r.after.clear();
    r.ready = nullptr;
    t_spare.rounds.push_back(std::move(r));
  }
  if (t_spare.lists.size() < t_spare.lists.capacity() && rounds_.capacity() <= SpareRounds::kMostRounds) {
    rounds_.clear();
    t_spare.lists.push_back(std::move(rounds_));
  }
}

Round& Schedule::round() {
  if (t_spare_ready && !t_spare_gone && !t_spare.rounds.empty()) {
    rounds_.push_back(std::move(t_spare.rounds.back()));
    t_spare.rounds.pop_back();
  } else {
    rounds_.emplace_back();
  }
  return rounds_.back();
}

uint8_t* Schedule::scratch(size_t bytes) {
  scratch_.push_back(take_scratch(bytes));
  return scratch_.back().get();
}

ScheduleOp::ScheduleOp(bagua_opkind_t kind, std::string description, std::unique_ptr<Schedule> schedule)
    : Operation(kind, std::move(description)), schedule_(std::move(schedule)) {
  // Operation::waiting_for keeps pointers to transfers: size the storage once so it never moves.
  size_t most = 0;
  auto calls = [](const std::vector<LocalStep>& steps) {
    return std::any_of(steps.begin(), steps.end(), [](const LocalStep& s) { return s.kind == LocalStep::Kind::kCall; });
  };
  has_calls_ = calls(schedule_->prologue());
  for (const Round& round : schedule_->rounds()) {
    most = std::max(most, round.recvs.size() + round.sends.size());
    has_calls_ = has_calls_ || calls(round.during) || calls(round.after);
  }
  transfers_.reserve(most);
  set_collective_sequence(schedule_->context().sequence);
}

void ScheduleOp::run_steps(const std::vector<LocalStep>& steps, Transport& transport) {
  const ScheduleContext& ctx = schedule_->context();
  for (const LocalStep& step : steps) {
    switch (step.kind) {
      case LocalStep::Kind::kCopy:
        if (step.count > 0 && step.dst != step.a) std::memmove(step.dst, step.a, step.count);
        break;
      case LocalStep::Kind::kReduce: reduce_from(step.dst, step.a, step.b, step.count, ctx.dtype, ctx.op); break;
      case LocalStep::Kind::kDivide: divide_by(step.dst, step.count, ctx.dtype, ctx.nranks); break;
      case LocalStep::Kind::kCall: {
        step.call();
        auto [sent, received] = schedule_->take_direct_traffic();
        if (sent + received > 0) {
          transport.count_direct_traffic(sent, received);
          add_bytes_sent(sent);
        }
        break;
      }
    }
  }
}

void ScheduleOp::post_round(Transport& transport) {
  const ScheduleContext& ctx = schedule_->context();
  Round& round = schedule_->rounds()[round_];
  transfers_.assign(round.recvs.size() + round.sends.size(), Transfer{});  // within the reserved capacity
  // Messages between two ranks in one round are told apart by their slot: how many came before them to or from the
  // same peer. Counted per peer in a table of the thread's (no allocation per round), cleared after use.
  thread_local std::vector<uint8_t> recv_slots, send_slots;
  if (recv_slots.size() < static_cast<size_t>(ctx.nranks)) {
    recv_slots.assign(static_cast<size_t>(ctx.nranks), 0);
    send_slots.assign(static_cast<size_t>(ctx.nranks), 0);
  }
  struct ClearSlots {  // also when posting throws: another communicator on this thread uses the tables next
    const Round& round;
    ~ClearSlots() {
      for (const RecvSpec& r : round.recvs) recv_slots[static_cast<size_t>(r.peer)] = 0;
      for (const SendSpec& s : round.sends) send_slots[static_cast<size_t>(s.peer)] = 0;
    }
  } clear_slots{round};
  auto next_slot = [](std::vector<uint8_t>& slots, int peer) -> uint64_t {
    uint8_t& slot = slots[static_cast<size_t>(peer)];
    if (slot >= 64)
      bagua::fail(BAGUA_ERR_INTERNAL, "schedule sends more than 64 messages between two ranks in one round");
    return slot++;
  };
  size_t t = 0;
  uint64_t base = static_cast<uint64_t>(round_) << 6;
  // Sends before receives: with the receives first, the two directions of an exchange between hosts took turns
  // instead of overlapping (TCP; a 4 MiB exchange at 1 Gbit/s, back to back, 50-87 ms instead of 35; likely a
  // rendezvous reply queued behind the replier's own data; docs/transport.md, "Sends first").
  for (const SendSpec& s : round.sends)
    post_send(transport, transfers_[t++], s.peer,
              make_tag(ctx.fingerprint, ctx.sequence, base | next_slot(send_slots, s.peer), ctx.rank), s.data, s.bytes,
              s.mode);
  for (const RecvSpec& r : round.recvs)
    post_recv(transport, transfers_[t++], r.peer,
              make_tag(ctx.fingerprint, ctx.sequence, base | next_slot(recv_slots, r.peer), r.peer), r.data, r.bytes,
              ctx.unmatched_bits);
  posted_ = true;
}

namespace {
thread_local const std::function<void()>* t_progress_hook = nullptr;
}  // namespace

ProgressHook::ProgressHook(const std::function<void()>& hook) : previous_(t_progress_hook) { t_progress_hook = &hook; }
ProgressHook::~ProgressHook() { t_progress_hook = previous_; }

void progress_in_flight() {
  if (t_progress_hook) (*t_progress_hook)();
}

void ScheduleOp::plan_staging(StagingWindow& window) {
  auto& rounds = schedule_->rounds();
  staged_ = std::make_unique<StagedSteps>(window, rounds.size() + 1);
  const size_t elem = datatype_size(schedule_->context().dtype);
  auto touch_steps = [&](size_t step, const std::vector<LocalStep>& steps) {
    for (const LocalStep& s : steps) switch (s.kind) {
        case LocalStep::Kind::kCopy:
          staged_->touch(step, s.a, s.count, false);
          staged_->touch(step, s.dst, s.count, true);
          break;
        case LocalStep::Kind::kReduce:
          staged_->touch(step, s.a, s.count * elem, false);
          staged_->touch(step, s.b, s.count * elem, false);
          staged_->touch(step, s.dst, s.count * elem, true);
          break;
        case LocalStep::Kind::kDivide: staged_->touch(step, s.dst, s.count * elem, true); break;
        case LocalStep::Kind::kCall: break;  // not pipelined (pipelines_staging)
      }
  };
  touch_steps(0, schedule_->prologue());
  for (size_t r = 0; r < rounds.size(); ++r) {
    for (const RecvSpec& recv : rounds[r].recvs) staged_->touch(r + 1, recv.data, recv.bytes, true);
    for (const SendSpec& send : rounds[r].sends) staged_->touch(r + 1, send.data, send.bytes, false);
    touch_steps(r + 1, rounds[r].during);
    touch_steps(r + 1, rounds[r].after);
  }
  staged_->release_unwritten();
}

std::string ScheduleOp::waiting_for() const {
  if (awaiting_input_) return "the copy of its input from device memory";
  if (started_ && !posted_ && round_ < schedule_->rounds().size() && schedule_->rounds()[round_].ready)
    return "its device work";
  return started_ || !schedule_->start_gate() ? Operation::waiting_for() : "its turn after an earlier operation";
}

void ScheduleOp::advance(Transport& transport) {
  if (!planned_) {
    planned_ = true;
    if (StagingWindow* window = StagingWindow::current()) plan_staging(*window);
  }
  if (!started_) {
    awaiting_input_ = staged_ && !staged_->arrived(0);
    if (awaiting_input_) return;
    if (schedule_->start_gate() && !schedule_->start_gate()()) return;
    started_ = true;
    run_steps(schedule_->prologue(), transport);
    if (staged_) staged_->finished(0);
  }
  auto& rounds = schedule_->rounds();
  while (round_ < rounds.size()) {
    if (!posted_) {
      if (rounds[round_].ready && !rounds[round_].ready()) return;
      awaiting_input_ = staged_ && !staged_->arrived(round_ + 1);
      if (awaiting_input_) return;
      post_round(transport);
      if (!rounds[round_].during.empty()) {
        std::function<void()> poll_in_flight = [this, &transport] {
          transport.progress();
          for (Transfer& transfer : transfers_) poll(transport, transfer);
        };
        ProgressHook hook(poll_in_flight);
        run_steps(rounds[round_].during, transport);
      }
    }
    bool all_done = true;
    for (Transfer& transfer : transfers_) all_done = poll(transport, transfer) && all_done;
    if (!all_done) return;
    run_steps(rounds[round_].after, transport);
    if (staged_) staged_->finished(round_ + 1);
    ++round_;
    posted_ = false;
  }
  finish();
}

}  // namespace bagua

// Comm, progress: the engine that advances operations, the watchdog that turns silence into TIMEOUT, and the
// health checks that turn a dead peer into REMOTE.
#include "core/comm.h"

#include <algorithm>
#include <new>

#include "base/backoff.h"
#include "base/logging.h"
#include "core/tags.h"

namespace bagua {

void Comm::retire(Operation& op) {
  recorder_.end(op.trace_id(),
                op.state() == Operation::State::kDone ? FlightRecorder::State::kDone : FlightRecorder::State::kFailed,
                op.status(), {}, op.collective_name(), op.algorithm_name());
  if (op.state() == Operation::State::kDone) {
    ++ops_completed_[op.kind()];
    bytes_by_op_[op.kind()] += op.bytes_sent();
  }
  unwatch(op);
}

void Comm::unwatch(Operation& op) {
  watches_.erase(std::remove_if(watches_.begin(), watches_.end(), [&](const auto& w) { return w.first == &op; }),
                 watches_.end());
}

void Comm::progress_all() {
  if (!transport_ || poisoned()) return;
  engine_passes_.store(engine_passes_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  transport_->progress();
  for (size_t i = 0; i < active_.size(); ++i) {
    Operation* op = active_[i];
    try {
      op->advance(*transport_);
    } catch (const Error& e) {
      // Any failure after an operation has posted transfers leaves the ranks out of step and transfers
      // pointing at user memory: poison, which cancels and tears them down (argument errors never get here).
      fail_everything(abort_requested_.load() ? BAGUA_ERR_ABORTED : e.status(), e.what());
      return;
    } catch (const std::bad_alloc&) {  // e.g. scratch of a local step: same reasoning, a system error
      fail_everything(BAGUA_ERR_SYSTEM, fmt::format("{}: out of memory", op->description()));
      return;
    } catch (const std::exception& e) {
      fail_everything(BAGUA_ERR_INTERNAL, fmt::format("{}: internal error: {}", op->description(), e.what()));
      return;
    }
  }
  for (size_t i = 0; i < active_.size();) {
    if (active_[i]->running()) {
      ++i;
      continue;
    }
    retire(*active_[i]);
    active_.erase(active_.begin() + static_cast<long>(i));
  }
}

bool Comm::progress_transport_idle(uint64_t* seen) noexcept {
  const uint64_t passes = engine_passes_.load(std::memory_order_relaxed);
  if (passes != *seen) {  // its own engine ran since the last look: leave it to that
    *seen = passes;
    return false;
  }
  // Never alongside the engine: UCX reads a request's completion without the worker's lock, so a request that
  // completed on this thread could show a stale status to the engine's check.
  std::unique_lock<std::recursive_mutex> lock(transport_mutex_, std::try_to_lock);
  if (!lock || poisoned() || !transport_) return false;  // (a failure poisons before it shuts the transport down)
  transport_->progress();
  return true;
}

void Comm::check_health_throttled() {
  // One poll() per millisecond at most: the bootstrap ring reports a dead neighbour or a relayed failure.
  CoarseClock::time_point now = CoarseClock::now();
  if (now - last_health_check_ < std::chrono::milliseconds(1)) return;
  last_health_check_ = now;
  try {
    ring_->check_health();
  } catch (const Error& e) {
    // A failure relayed from another rank names what that rank was doing; add what this one was doing.
    std::string doing;
    for (Operation* op : active_)
      if (op->running() && doing.size() < 512)
        doing += fmt::format("{}{} (waiting for: {})", doing.empty() ? "" : "; ", op->description(), op->waiting_for());
    fail_everything(abort_requested_.load() ? BAGUA_ERR_ABORTED : e.status(),
                    doing.empty() ? std::string(e.what()) : fmt::format("{}; this rank was in {}", e.what(), doing));
  }
}

void Comm::check_peers_now() {
  if (abort_requested_.load()) throw Error(BAGUA_ERR_ABORTED, "bagua_comm_abort was called");
  check_usable();
  ring_->check_health();
}

void Comm::check_watchdog(Operation& op) {
  for (auto& [watched, watch] : watches_) {
    if (watched != &op) continue;
    CoarseClock::time_point now = CoarseClock::now();
    if (op.events() != watch.events || !op.watched()) {
      watch.events = op.events();
      watch.last_progress = now;
      watch.mismatch_checked = false;
    } else if (!watch.mismatch_checked && now - watch.last_progress > std::chrono::milliseconds(kMismatchCheckMs)) {
      // Stalled: a peer's message under this sequence number with another call's fingerprint never matches.
      watch.mismatch_checked = true;
      std::string mismatch = transport_ ? op.mismatched_message(*transport_) : std::string();
      if (!mismatch.empty())
        fail_everything(BAGUA_ERR_INVALID_USAGE, fmt::format("{}: {}", op.description(), mismatch));
    } else if (now - watch.last_progress > std::chrono::milliseconds(config_.timeout_ms)) {
      std::string unmatched = transport_ ? op.unmatched_messages(*transport_) : std::string();
      fail_everything(BAGUA_ERR_TIMEOUT,
                      fmt::format("{} made no progress for {:.1f} s (BAGUA_TIMEOUT); waiting for: {}{}{}",
                                  op.description(), config_.timeout_ms / 1000.0, op.waiting_for(),
                                  unmatched.empty() ? "" : "; the ranks' calls differ: ", unmatched));
    }
    return;
  }
}

// A collective message of an earlier sequence number that no receive took: the ranks' calls under that number
// differed (two ranks both broadcast as root, say). Checked when a collective starts or finishes on an otherwise
// idle host communicator, so that every earlier collective here has finished. UCX delivers a sender's messages in
// order, so once this call has received from a peer, that peer's earlier messages are all here.
void Comm::check_stranded_messages(const Operation& op) {
  if (!config_.fingerprints || op.collective_sequence() < 0 || !active_.empty() || !transport_) return;
  if (has_device_proxy_.load(std::memory_order_acquire)) return;  // device calls take their numbers before they start
  uint64_t sender_tag = 0;
  if (!transport_->find_unmatched(uint64_t{2} << 62, kTagSpaceMask, &sender_tag)) return;
  const uint64_t behind = (static_cast<uint64_t>(op.collective_sequence()) - tag_sequence(sender_tag)) & 0xfffu;
  if (behind == 0 || behind > kStrandedWindow) return;  // a message of this call or of a later one
  const std::string message = fmt::format(
      "{}: the ranks' calls differ: rank {} sent {}, which no call of this rank received (this rank's call under "
      "that number has finished)",
      op.description(), tag_source(sender_tag), describe_message(sender_tag));
  fail_everything(BAGUA_ERR_INVALID_USAGE, message);
  throw Error(BAGUA_ERR_INVALID_USAGE, message);
}

void Comm::start(Operation& op) {
  std::lock_guard<std::timed_mutex> lock(engine_mutex_);
  TransportLock transport(*this);
  check_usable();
  check_stranded_messages(op);
  try {  // the operation holds its sequence number: not starting it leaves this rank out of step with its peers
    active_.reserve(active_.size() + 1);
    watches_.reserve(watches_.size() + 1);
    op.set_trace_id(recorder_.begin(op.kind(), op.description()));
  } catch (const std::bad_alloc&) {
    fail_everything(BAGUA_ERR_SYSTEM, fmt::format("out of memory starting {}", op.description()));
    throw;
  }
  active_.push_back(&op);  // (room reserved above)
  watches_.push_back({&op, Watch{op.events(), CoarseClock::now()}});
  progress_all();
  if (op.state() == Operation::State::kDone) check_stranded_messages(op);
}

bool Comm::test(Operation& op, TestPass* pass) {
  std::lock_guard<std::timed_mutex> lock(engine_mutex_);
  TransportLock transport(*this);
  if (op.running()) {
    if (abort_requested_.load()) fail_everything(BAGUA_ERR_ABORTED, "bagua_comm_abort was called");
    if (poisoned()) fail_everything(poison_status(), poison_message());  // marked by fail_now without the engine
    if (pass == nullptr || !pass->progressed) progress_all();
    if (pass) pass->progressed = true;
    if (op.state() == Operation::State::kDone) check_stranded_messages(op);
    if (op.running()) check_health_throttled();
    if (op.running()) check_watchdog(op);
    // Waiting for its turn, op is not watched itself: watch the operations ahead of it instead, which nobody may
    // be testing (a non-blocking call that is not waited on).
    if (op.running() && !op.watched() && (pass == nullptr || !pass->watched_ahead)) {
      if (pass) pass->watched_ahead = true;
      const std::vector<Operation*> ahead = active_;  // (a failure clears active_)
      for (Operation* other : ahead)
        if (other != &op && other->running() && op.running()) check_watchdog(*other);
    }
  }
  if (op.state() == Operation::State::kFailed) throw Error(op.status(), op.error());
  return op.state() == Operation::State::kDone;
}

void Comm::wait(Operation& op) {
  Backoff backoff;
  uint64_t last_events = op.events();
  while (!test(op)) {
    if (op.events() != last_events) {
      last_events = op.events();
      backoff.busy();
    } else {
      backoff.idle();
    }
  }
}

void Comm::forget(Operation& op) {
  std::lock_guard<std::timed_mutex> lock(engine_mutex_);
  active_.erase(std::remove(active_.begin(), active_.end(), &op), active_.end());
  unwatch(op);
}

bagua_status_t Comm::async_error() {
  std::lock_guard<std::timed_mutex> lock(engine_mutex_);
  if (!poisoned()) check_health_throttled();
  return poison_status_.load();
}

}  // namespace bagua

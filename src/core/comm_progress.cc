// Comm, progress: the engine that advances operations, the watchdog that turns silence into TIMEOUT, and the
// health checks that turn a dead peer into REMOTE.
#include "core/comm.h"

#include <algorithm>
#include <new>

#include "base/backoff.h"
#include "base/logging.h"

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

void Comm::check_health_throttled() {
  // One poll() per millisecond at most: the bootstrap ring reports a dead neighbour or a relayed failure.
  Clock::time_point now = Clock::now();
  if (now - last_health_check_ < std::chrono::milliseconds(1)) return;
  last_health_check_ = now;
  try {
    ring_->check_health();
  } catch (const Error& e) {
    fail_everything(abort_requested_.load() ? BAGUA_ERR_ABORTED : e.status(), e.what());
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
    Clock::time_point now = Clock::now();
    if (op.events() != watch.events || !op.watched()) {
      watch.events = op.events();
      watch.last_progress = now;
    } else if (now - watch.last_progress > std::chrono::milliseconds(config_.timeout_ms)) {
      fail_everything(BAGUA_ERR_TIMEOUT,
                      fmt::format("{} made no progress for {:.1f} s (BAGUA_TIMEOUT); waiting for: {}", op.description(),
                                  config_.timeout_ms / 1000.0, op.waiting_for()));
    }
    return;
  }
}

void Comm::start(Operation& op) {
  std::lock_guard<std::timed_mutex> lock(engine_mutex_);
  check_usable();
  op.set_trace_id(recorder_.begin(op.kind(), op.description()));
  active_.push_back(&op);
  watches_.push_back({&op, Watch{op.events(), Clock::now()}});
  progress_all();
}

bool Comm::test(Operation& op) {
  std::lock_guard<std::timed_mutex> lock(engine_mutex_);
  if (op.running()) {
    if (abort_requested_.load()) fail_everything(BAGUA_ERR_ABORTED, "bagua_comm_abort was called");
    progress_all();
    if (op.running()) check_health_throttled();
    if (op.running()) check_watchdog(op);
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

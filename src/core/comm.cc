// Comm: lifetime, poisoning, errors and counters. Initialisation is in comm_init.cc, the progress engine in
// comm_progress.cc, the host layout in comm_layout.cc.
#include "core/comm.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "base/logging.h"
#include "base/scratch_cache.h"
#include "base/timed_lock.h"
#include "core/device_proxy.h"
#include "core/idle_progress.h"
#include "core/tags.h"

namespace bagua {

namespace {
std::atomic<int> g_live_comms{0};
}  // namespace

Comm::Comm() { ++g_live_comms; }

Comm::~Comm() {
  {  // destroyed, not aborted: what the library made from it goes on (the proxy below may abort this one)
    std::lock_guard<std::mutex> lock(abort_links_->mutex);
    abort_links_->linked.clear();
  }
  if (auto parent = aborted_with_.lock()) {
    std::lock_guard<std::mutex> lock(parent->mutex);
    parent->linked.erase(std::remove(parent->linked.begin(), parent->linked.end(), this), parent->linked.end());
  }
  if (idle_progress_) idle_progress_remove(this);
  device_proxy_.reset();  // finishes (or aborts) device operations while the engine still runs
  {
    std::lock_guard<std::timed_mutex> lock(engine_mutex_);
    bool healthy = !poisoned();
    for (Operation* op : active_) op->fail(BAGUA_ERR_ABORTED, "the communicator was destroyed");
    active_.clear();
    if (ring_ && healthy) ring_->say_goodbye();
    if (transport_) transport_->shutdown(healthy);
    if (ring_) ring_->shutdown();
    detached_.clear();  // their transfers are cancelled; what they hold of this communicator still exists
  }
  if (--g_live_comms == 0) release_scratch_cache();  // no communicator left to reuse it
}

std::vector<Comm::DetachedOutcome> Comm::adopt_detached(const std::vector<std::unique_ptr<Operation>*>& slots) {
  std::lock_guard<std::timed_mutex> lock(engine_mutex_);  // (the device proxy's thread advances host operations too)
  std::vector<DetachedOutcome> outcomes(slots.size());
  for (size_t i = 0; i < slots.size(); ++i) {
    const Operation& op = **slots[i];
    if (op.state() == Operation::State::kFailed) {
      outcomes[i] = {op.status(), op.error()};
    } else if (op.state() == Operation::State::kRunning) {
      outcomes[i] = {BAGUA_ERR_ABORTED, fmt::format("{}: bagua_comm_destroy came before it completed; its output is "
                                                    "undefined",
                                                    op.description())};
    }
  }
  detached_.reserve(detached_.size() + slots.size());
  for (std::unique_ptr<Operation>* slot : slots) detached_.push_back(std::move(*slot));  // (no reallocation)
  return outcomes;
}

DeviceProxy& Comm::device_proxy() {
  std::lock_guard<std::mutex> lock(device_proxy_mutex_);
  if (!device_proxy_) {
    device_proxy_ = std::make_unique<DeviceProxy>(*this);
    has_device_proxy_.store(true, std::memory_order_release);
  }
  return *device_proxy_;
}

void Comm::check_usable() const {
  bagua_status_t status = poison_status_.load();
  if (status == BAGUA_SUCCESS) return;
  std::lock_guard<std::mutex> lock(mutex_);
  throw Error(status, fmt::format("communicator is unusable after an earlier error: {}", poison_message_));
}

void Comm::poison(bagua_status_t status, const std::string& message) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    bagua_status_t expected = BAGUA_SUCCESS;
    if (!poison_status_.compare_exchange_strong(expected, status)) return;
    poison_message_ = message;
  }
  BAGUA_WARN("communicator {:#x} failed: {}", comm_id_, message);
  // Tell the neighbours, who pass it on, so no rank waits for its full timeout on this one.
  if (ring_) ring_->notify_failure(status, message);
}

std::string Comm::poison_message() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return poison_message_;
}

void Comm::fail_everything(bagua_status_t status, const std::string& message) {
  poison(status, message);
  const bagua_status_t failure = poison_status_.load();
  try {  // the flight recorder's view first, while the operations still know what they wait for
    for (Operation* op : active_) {
      if (op->state() == Operation::State::kDone)  // finished in this pass, not yet retired: it succeeded
        recorder_.end(op->trace_id(), FlightRecorder::State::kDone, BAGUA_SUCCESS);
      else
        recorder_.end(op->trace_id(), FlightRecorder::State::kFailed, failure, op->waiting_for());
    }
  } catch (const std::exception&) {  // (out of memory for the strings): the teardown below must still run
  }
  for (Operation* op : active_) op->fail(failure, message);
  active_.clear();
  watches_.clear();
  // Nothing may write into user buffers once the error is reported.
  if (transport_) {
    TransportLock transport(*this);
    transport_->shutdown(false);
  }
  if (config_.trace_size > 0 && !trace_written_.exchange(true)) {
    try {
      dump_trace({}, message);
    } catch (const std::exception& e) {
      BAGUA_WARN("the flight recorder could not be written: {}", e.what());
    }
  }
}

void Comm::fail_now(bagua_status_t status, const std::string& message) {
  poison(status, message);
  if (auto lock = lock_within(engine_mutex_, std::chrono::milliseconds(1500)))
    fail_everything(poison_status_.load(), message);
}

void Comm::abort() {
  abort_requested_.store(true);
  shrink_stop_.store(true);
  poison(BAGUA_ERR_ABORTED, "bagua_comm_abort was called");
  if (ring_) ring_->shutdown();
  // A blocked operation notices the flag within a poll slice and tears down itself; if none is running,
  // tear down here.
  if (auto lock = lock_within(engine_mutex_, std::chrono::milliseconds(1500)))
    fail_everything(BAGUA_ERR_ABORTED, "bagua_comm_abort was called");
  std::lock_guard<std::mutex> lock(abort_links_->mutex);  // (a linked one is not destroyed meanwhile)
  for (Comm* internal : abort_links_->linked) internal->abort();
}

void Comm::link_for_abort(Comm& internal) {
  std::lock_guard<std::mutex> lock(abort_links_->mutex);
  abort_links_->linked.push_back(&internal);
  internal.aborted_with_ = abort_links_;
}

void Comm::begin_setup_operations(int count) {
  std::lock_guard<std::timed_mutex> lock(engine_mutex_);
  if (collective_sequence_ != 0 || count <= 0 || count > static_cast<int>(kStrandedWindow))
    fail(BAGUA_ERR_INTERNAL, "setup operations after the communicator's first call");
  collective_sequence_ = (uint64_t{1} << kTagSequenceBits) - static_cast<uint64_t>(count);
}

void Comm::forget_setup_operations() {
  std::lock_guard<std::timed_mutex> lock(engine_mutex_);
  if (!active_.empty() || collective_sequence_ != (uint64_t{1} << kTagSequenceBits))
    fail(BAGUA_ERR_INTERNAL, "setup operations still in flight, or not as many as announced");
  collective_sequence_ = 0;
  for (int k = 0; k < BAGUA_OPKIND_COUNT; ++k) ops_completed_[k] = bytes_by_op_[k] = 0;
  compute_ns_.store(0, std::memory_order_relaxed);
  quantized_full_precision_.store(0, std::memory_order_relaxed);
  if (transport_) warm_up_counters_ = transport_->counters();
  recorder_.clear();
}

bagua_stats_t Comm::stats() const {
  bagua_stats_t out{};
  out.size = sizeof(out);
  if (transport_) {
    const TransportCounters& c = transport_->counters();
    out.bytes_sent = c.bytes_sent - warm_up_counters_.bytes_sent;
    out.bytes_received = c.bytes_received - warm_up_counters_.bytes_received;
    out.messages_sent = c.messages_sent - warm_up_counters_.messages_sent;
    out.messages_received = c.messages_received - warm_up_counters_.messages_received;
  }
  for (int k = 0; k < BAGUA_OPKIND_COUNT; ++k) {
    out.ops[k] = ops_completed_[k];
    out.bytes_sent_by_op[k] = bytes_by_op_[k];
  }
  out.compute_ns = compute_ns_.load(std::memory_order_relaxed);
  out.quantized_full_precision = quantized_full_precision_.load(std::memory_order_relaxed);
  return out;
}

void Comm::set_last_error(const std::string& message) {
  std::lock_guard<std::mutex> lock(mutex_);
  last_error_ = message;
}

const char* Comm::last_error() {
  std::lock_guard<std::mutex> lock(mutex_);
  last_error_view_ = last_error_;
  return last_error_view_.c_str();
}

std::string Comm::trace_header(const std::string& reason) const {
  const RankInfo& me = ranks_[static_cast<size_t>(rank_)];
  return fmt::format("bagua flight recorder: comm {:#x}{}{} rank {} of {} host {} pid {}; {}", comm_id_,
                     config_.comm_name.empty() ? "" : " ", config_.comm_name, rank_, nranks_, me.hostname, getpid(),
                     reason);
}

std::string Comm::dump_trace_now(const std::string& path) {
  {  // the engine only while reading what the running operations wait for, not while writing the file
    if (auto lock = lock_within(engine_mutex_, std::chrono::milliseconds(1500))) note_waiting_of_active();
  }
  return dump_trace(path, "written on demand (bagua_comm_dump_trace)");
}

void Comm::note_waiting_of_active() {
  for (Operation* op : active_) recorder_.note_waiting(op->trace_id(), op->waiting_for());
}

std::string Comm::dump_trace(const std::string& path, const std::string& reason) {
  std::string file = path;
  if (file.empty() && !config_.trace_dir.empty())
    file = fmt::format("{}/bagua-trace-{:x}-rank{}.txt", config_.trace_dir, comm_id_, rank_);
  if (file.empty()) {
    BAGUA_WARN("{}", recorder_.tail(trace_header(reason), 20) +
                         "# (the last 20; BAGUA_TRACE_DIR or bagua_comm_dump_trace write them all)");
    return "the log";
  }
  std::string text = recorder_.dump(trace_header(reason));
  std::FILE* f = std::fopen(file.c_str(), "w");
  if (f == nullptr) fail(BAGUA_ERR_SYSTEM, "cannot write the flight recorder to {}: {}", file, std::strerror(errno));
  bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  ok = std::fclose(f) == 0 && ok;
  if (!ok) fail(BAGUA_ERR_SYSTEM, "cannot write the flight recorder to {}: {}", file, std::strerror(errno));
  BAGUA_WARN("flight recorder written to {}", file);
  return file;
}

}  // namespace bagua

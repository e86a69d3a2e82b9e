// Stream claims, stream gates, signal words and the proxy thread of the device path (docs/cuda.md); the staging
// pool, drains and request completion are in core/device_staging.cc, DeviceOperation in core/device_operation.cc.
#include "core/device_proxy.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <optional>

#include "base/backoff.h"
#include "base/error.h"
#include "base/logging.h"
#include "core/comm.h"

namespace bagua {

namespace {

constexpr uint32_t kGateWordsPerPage = 1024;
// How much longer than BAGUA_TIMEOUT the monitor lets the proxy thread stay in one round of its loop while gates are
// parked (a staging copy's own wait, ~DeviceOperation's, gives up at BAGUA_TIMEOUT).
constexpr int64_t kMonitorMarginMs = 2000;

int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// CUDA's special stream handles: the legacy default stream (also NULL) and the per-thread default stream.
const DeviceStream kLegacyStream = reinterpret_cast<DeviceStream>(0x1);
const DeviceStream kPerThreadStream = reinterpret_cast<DeviceStream>(0x2);

// Streams with device work in flight, process-wide.
struct StreamUse {
  uint64_t comm_id;
  int rank;
  DeviceStream stream;
  int device;
  bool blocking;
  int operations;
};
std::mutex g_stream_mutex;
// Stream gates parked and not yet released, by every communicator of the process: while any is, freeing pinned
// memory (which waits for the device, parked streams included) could wait for a rank that waits for us.
std::atomic<int> g_parked_gates{0};
std::vector<StreamUse> g_stream_uses;  // entries are reused, never erased (indices stay valid)

// Gate pages of destroyed communicators, each with its words' generations. A stream may reach a gate after the
// communicator that released it is gone, so a page is never freed: a later communicator takes it over and goes on
// counting from these generations. A word only grows, and such a stream's wait is met whenever it reads it.
struct RetiredGatePage {
  uint32_t* page;
  std::vector<uint32_t> generations;
};
std::mutex g_retired_mutex;
std::vector<RetiredGatePage> g_retired_gate_pages;
std::atomic<uint64_t> g_gate_pages_taken_over{0};
// Idle pinned staging blocks, by size, that a communicator let go (destroyed, or making room under its limit) while a
// stream of the process was parked on a gate: a new block of any communicator takes one that fits, and the rest are
// freed once none is parked.
std::multimap<size_t, void*> g_unfreed_blocks;

}  // namespace

bool is_legacy(DeviceStream s) { return s == nullptr || s == kLegacyStream; }
bool is_per_thread(DeviceStream s) { return s == kPerThreadStream; }

namespace {

// Whether work on `a` of one thread rank would be ordered behind work on `b` of another.
bool ordered_behind(const StreamUse& a, const StreamUse& b) {
  if (a.device != b.device) return false;
  if (is_legacy(a.stream) && is_legacy(b.stream)) return true;
  // Each thread has its own per-thread default stream; it is a blocking stream, synchronized with the legacy one.
  if (a.stream == kPerThreadStream && b.stream == kPerThreadStream) return false;
  if (a.stream == b.stream) return true;
  return (is_legacy(a.stream) && b.blocking) || (is_legacy(b.stream) && a.blocking);
}

}  // namespace

// ---- stream claims ----

void StreamClaim::take(DeviceRuntime& runtime, uint64_t comm_id, int rank, DeviceStream stream, bool claim) {
  StreamUse use{comm_id, rank, stream, runtime.stream_device(stream), runtime.stream_blocking(stream), 1};
  std::lock_guard<std::mutex> lock(g_stream_mutex);
  long free_index = -1;
  for (size_t i = 0; i < g_stream_uses.size(); ++i) {
    const StreamUse& other = g_stream_uses[i];
    if (other.operations == 0) {
      free_index = static_cast<long>(i);
      continue;
    }
    if (other.comm_id == comm_id && other.rank != rank && ordered_behind(use, other))
      fail(BAGUA_ERR_INVALID_USAGE,
           "rank {} of this communicator, a thread of this process, has device work in flight on {}; ranks that are "
           "threads of one process need a stream each (and the legacy default stream waits for blocking streams), "
           "or they wait on each other",
           other.rank,
           other.stream == stream ? "the same stream" : "a stream that the legacy default stream synchronizes with");
  }
  if (!claim) return;
  if (free_index < 0) {
    g_stream_uses.push_back(use);
    index_ = static_cast<long>(g_stream_uses.size() - 1);
  } else {
    g_stream_uses[free_index] = use;
    index_ = free_index;
  }
}

StreamClaim::~StreamClaim() {
  if (index_ < 0) return;
  std::lock_guard<std::mutex> lock(g_stream_mutex);
  g_stream_uses[index_].operations = 0;
}

// ---- staging leases and gates ----

StagingLease& StagingLease::operator=(StagingLease&& other) noexcept {
  if (this != &other) {
    reset();
    std::swap(pool_, other.pool_);
    std::swap(ptr_, other.ptr_);
    std::swap(bytes_, other.bytes_);
  }
  return *this;
}

void StagingLease::reset() {
  if (pool_ != nullptr) pool_->give_back(ptr_, bytes_);
  pool_ = nullptr;
  ptr_ = nullptr;
  bytes_ = 0;
}

StreamGate& StreamGate::operator=(StreamGate&& other) noexcept {
  if (this != &other) {
    release();
    std::swap(owner_, other.owner_);
    std::swap(slot_, other.slot_);
    std::swap(word_, other.word_);
    std::swap(value_, other.value_);
  }
  return *this;
}

void StreamGate::release() {
  if (owner_ != nullptr) owner_->release_slot(slot_, word_, value_);
  owner_ = nullptr;
}

// ---- the proxy ----

bool DeviceProxy::pipelined_staging() const { return comm_.config().pipelined_staging; }

bool DeviceProxy::gates_parked_anywhere() { return g_parked_gates.load() != 0; }

uint64_t DeviceProxy::gate_pages_taken_over() { return g_gate_pages_taken_over.load(); }

DeviceProxy::DeviceProxy(Comm& comm) : comm_(comm), runtime_(device_runtime()) {
  DeviceRuntime* runtime = &runtime_;
  ipc_cache_ = std::make_unique<IpcCache>(
      comm_.config().ipc_cache_entries,
      [runtime](const IpcHandle& handle, int device) { return runtime->open_ipc(handle, device); },
      [this](void* mapped, int device) { close_later(mapped, device); });
  caller_mappings_ = std::make_unique<CallerIpcMappings>(runtime_, comm_.config().ipc_cache_entries);
  heartbeat_ns_.store(steady_ns());
  thread_ = std::thread([this] { run(); });
  try {
    monitor_ = std::thread([this] { monitor(); });
  } catch (...) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
      changed_.notify_all();
    }
    thread_.join();
    throw;
  }
}

DeviceProxy::~DeviceProxy() {
  {
    std::unique_lock<std::mutex> lock(mutex_);
    if (!changed_.wait_for(lock, std::chrono::milliseconds(comm_.config().timeout_ms),
                           [&] { return entries_.empty(); })) {
      lock.unlock();
      BAGUA_WARN("destroying a communicator with device operations in flight: aborting them");
      comm_.abort();
      lock.lock();
      changed_.wait_for(lock, std::chrono::seconds(5), [&] { return entries_.empty(); });
    }
    stopping_ = true;
    changed_.notify_all();
  }
  thread_.join();
  for (Entry& e : entries_) {
    heartbeat_ns_.store(steady_ns());  // (the monitor still watches: this thread ends the operations now)
    e.op->fail(BAGUA_ERR_ABORTED, "the communicator was destroyed");
    finish(e, BAGUA_ERR_ABORTED, "the communicator was destroyed");
  }
  entries_.clear();
  {
    std::lock_guard<std::mutex> lock(parked_mutex_);
    monitor_stopping_ = true;
    monitor_wake_.notify_all();
  }
  monitor_.join();
  {
    // Requests whose output was never waited for: their staging goes back (the stream has staged their input), and
    // a later wait reports the destruction.
    std::lock_guard<std::mutex> lock(requests_mutex_);
    for (RequestOutput& r : request_outputs_) {
      for (const StreamSignal& signal : r.output.signals) give_back_signal(signal);
      r.completion->status = BAGUA_ERR_ABORTED;
      r.completion->error = "the communicator was destroyed before the request was waited for";
      r.completion->done.store(true, std::memory_order_release);
    }
    request_outputs_.clear();
  }
  ipc_cache_.reset();
  close_pending(true);
  for (auto& [device, stream] : copy_streams_) runtime_.destroy_stream(stream);
  // Staging that streams still copy: handed back as they finish (each within the timeout), else kept forever.
  for (;;) {
    drain(true);
    {
      std::lock_guard<std::mutex> lock(draining_mutex_);
      if (draining_.empty()) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  caller_mappings_.reset();  // (after the drain: the calls that used them have ended)
  retire_pinned(std::move(free_blocks_));
  if (signals_kept_.load()) return;  // a stream may still write an older value into a word: the pages stay unused
  std::lock_guard<std::mutex> lock(g_retired_mutex);
  for (size_t p = 0; p < gate_pages_.size(); ++p) {
    try {
      RetiredGatePage retired{gate_pages_[p], {}};
      retired.generations.assign(gate_generation_.begin() + p * kGateWordsPerPage,
                                 gate_generation_.begin() + (p + 1) * kGateWordsPerPage);
      g_retired_gate_pages.push_back(std::move(retired));
    } catch (...) {  // out of memory: the page stays unused
    }
  }
}

void DeviceProxy::retire_pinned(std::multimap<size_t, void*> blocks) noexcept {
  {
    std::lock_guard<std::mutex> lock(g_retired_mutex);
    if (gates_parked_anywhere()) {     // freeing pinned memory would wait for the parked streams
      g_unfreed_blocks.merge(blocks);  // (moves nodes: allocates nothing)
      return;
    }
    blocks.merge(g_unfreed_blocks);
  }
  for (auto& [bytes, p] : blocks) runtime_.free_mapped(p);
}

std::pair<void*, size_t> DeviceProxy::take_unfreed_block(size_t bytes) {
  std::lock_guard<std::mutex> lock(g_retired_mutex);
  auto it = g_unfreed_blocks.lower_bound(bytes);  // as an idle block: at most twice the size asked
  if (it == g_unfreed_blocks.end() || it->first > 2 * bytes) return {nullptr, 0};
  const std::pair<void*, size_t> block{it->second, it->first};
  g_unfreed_blocks.erase(it);
  return block;
}

void DeviceProxy::open_requested_mappings() {
  caller_mappings_->open_requested([] { return !gates_parked_anywhere(); });
}

void DeviceProxy::check_stream(DeviceStream stream) const {
  if (runtime_.stream_capturing(stream))
    fail(BAGUA_ERR_NOT_SUPPORTED,
         "the stream is being captured into a CUDA graph (or, for the legacy default stream, another blocking stream "
         "of the device is); bagua device calls cannot be captured (docs/cuda.md)");
  StreamClaim check;
  check.take(runtime_, comm_.id(), comm_.rank(), stream, false);
  runtime_.load_kernels(runtime_.stream_device(stream));  // before this call parks the stream
}

StreamSignal DeviceProxy::take_signal() {
  for (;;) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!free_slots_.empty()) {
        StreamSignal signal;
        signal.slot = free_slots_.back();
        free_slots_.pop_back();
        signal.value = ++gate_generation_[signal.slot];
        signal.word = &gate_pages_[signal.slot / kGateWordsPerPage][signal.slot % kGateWordsPerPage];
        return signal;
      }
    }
    // A page a destroyed communicator left, or a new one, allocated without the lock: the allocation may wait
    // inside the driver (behind a thread whose pageable copy waits for a parked stream), and nothing that opens a
    // gate may wait for it.
    RetiredGatePage taken{nullptr, std::vector<uint32_t>(kGateWordsPerPage, 0)};
    {
      std::lock_guard<std::mutex> lock(g_retired_mutex);
      if (!g_retired_gate_pages.empty()) {
        taken = std::move(g_retired_gate_pages.back());
        g_retired_gate_pages.pop_back();
        g_gate_pages_taken_over.fetch_add(1);
      }
    }
    if (taken.page == nullptr) {
      taken.page = static_cast<uint32_t*>(runtime_.alloc_mapped(kGateWordsPerPage * sizeof(uint32_t)));
      if (taken.page == nullptr) fail(BAGUA_ERR_SYSTEM, "out of memory: could not allocate a page of stream gates");
      std::fill(taken.page, taken.page + kGateWordsPerPage, 0u);
    }
    std::unique_lock<std::mutex> lock(mutex_);
    try {
      gate_pages_.reserve(gate_pages_.size() + 1);
      gate_generation_.reserve(gate_generation_.size() + kGateWordsPerPage);
      free_slots_.reserve(free_slots_.size() + kGateWordsPerPage);
    } catch (...) {
      lock.unlock();
      std::lock_guard<std::mutex> retired(g_retired_mutex);
      try {
        g_retired_gate_pages.push_back(std::move(taken));
      } catch (...) {  // out of memory: the page stays unused (a lagging stream may still read a word in it)
      }
      throw;
    }
    const uint32_t first = static_cast<uint32_t>(gate_generation_.size());
    gate_pages_.push_back(taken.page);
    gate_generation_.insert(gate_generation_.end(), taken.generations.begin(), taken.generations.end());
    for (uint32_t i = kGateWordsPerPage; i-- > 0;) free_slots_.push_back(first + i);
  }
}

// The stream a handle names: the legacy default stream's handles name one per device (the current one), and the
// per-thread default stream one per thread and device, which is never passed along.
std::optional<std::pair<DeviceStream, int>> DeviceProxy::passing_key(DeviceStream stream) const {
  if (stream == kPerThreadStream) return std::nullopt;
  return std::make_pair(is_legacy(stream) ? kLegacyStream : stream, runtime_.stream_device(stream));
}

void DeviceProxy::pass_block_along(DeviceStream stream, const std::shared_ptr<StagingLease>& block) {
  const auto key = passing_key(stream);
  if (!key) return;
  std::lock_guard<std::mutex> lock(passed_mutex_);
  passed_blocks_[*key] = block;
}

std::shared_ptr<StagingLease> DeviceProxy::block_passed_along(DeviceStream stream, size_t bytes) {
  const auto key = passing_key(stream);
  if (!key) return nullptr;
  std::lock_guard<std::mutex> lock(passed_mutex_);
  auto it = passed_blocks_.find(*key);
  if (it == passed_blocks_.end()) return nullptr;
  std::shared_ptr<StagingLease> block = it->second.lock();
  if (block == nullptr || block->bytes() < bytes) return nullptr;  // (drained already: an idle block now)
  passed_blocks_.erase(it);
  return block;
}

void DeviceProxy::give_back_signal(const StreamSignal& signal) {
  std::lock_guard<std::mutex> lock(mutex_);
  try {
    free_slots_.push_back(signal.slot);
  } catch (...) {  // out of memory: the slot is lost
  }
}

std::shared_ptr<StreamGate> DeviceProxy::park(DeviceStream stream) {
  const StreamSignal taken = take_signal();
  const uint32_t slot = taken.slot, value = taken.value;
  volatile uint32_t* word = taken.word;
  auto gate = std::make_shared<StreamGate>(this, slot, word, value);  // released (a no-op) if what follows throws
  g_parked_gates.fetch_add(1);
  {
    std::lock_guard<std::mutex> lock(parked_mutex_);
    parked_.push_back({slot, word, value});
  }
  runtime_.wait_value(stream, word, value);
  return gate;
}

void DeviceProxy::close_later(void* mapped, int device) {
  std::lock_guard<std::mutex> lock(closes_mutex_);
  try {
    pending_closes_.emplace_back(mapped, device);
  } catch (...) {  // out of memory: the mapping stays open until the process ends
  }
}

void DeviceProxy::close_pending(bool force) {
  std::vector<std::pair<void*, int>> closing;
  {
    std::lock_guard<std::mutex> lock(closes_mutex_);
    if (pending_closes_.empty() || (!force && g_parked_gates.load() != 0)) return;
    closing.swap(pending_closes_);
  }
  for (auto& [mapped, device] : closing) runtime_.close_ipc(mapped, device);
}

void DeviceProxy::release_slot(uint32_t slot, volatile uint32_t* word, uint32_t value) {
  {
    // The word first, under the monitor's lock only: no lock that another thread may hold inside a runtime call
    // may keep a gate shut. Unlisted before the slot can be reused, since the monitor stores only into words still
    // listed here.
    std::lock_guard<std::mutex> lock(parked_mutex_);
    __atomic_store_n(word, value, __ATOMIC_RELEASE);
    auto it = std::find_if(parked_.begin(), parked_.end(), [&](const ParkedGate& g) { return g.slot == slot; });
    if (it != parked_.end()) parked_.erase(it);
  }
  g_parked_gates.fetch_sub(1);
  std::lock_guard<std::mutex> lock(mutex_);
  try {
    free_slots_.push_back(slot);
  } catch (...) {  // out of memory: the slot is lost, the stream is released all the same
  }
}

DeviceStream DeviceProxy::copy_stream(int device) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = copy_streams_.find(device);
    if (it != copy_streams_.end()) return it->second;
  }
  // Created outside the lock: a request's waiting thread may create it, and a runtime call may block.
  DeviceStream stream = runtime_.create_stream(device);
  std::unique_lock<std::mutex> lock(mutex_);
  auto [it, inserted] = copy_streams_.emplace(device, stream);
  DeviceStream chosen = it->second;
  lock.unlock();
  if (!inserted) runtime_.destroy_stream(stream);  // another thread's came first
  return chosen;
}

void DeviceProxy::submit(std::unique_ptr<DeviceOperation> op, std::shared_ptr<DeviceCompletion> completion) {
  try {
    op->claim().take(runtime_, comm_.id(), comm_.rank(), op->stream(), true);
    if (op->computes_on_caller_stream() && (completion || op->ordered() || !op->can_stage_on_caller_stream()))
      bagua::fail(BAGUA_ERR_INTERNAL, "{}: device phases need a blocking call outside a group", op->description());
    if (!op->ordered()) {
      if (op->can_stage_on_caller_stream()) {
        op->enqueue_input_on_caller_stream();
        if (completion) {
          op->set_order(nullptr, nullptr);  // a request parks no stream: its output goes back when it is waited for
        } else {
          op->enqueue_output_pieces_on_caller_stream();
          op->set_order(nullptr, park(op->stream()));
          op->enqueue_output_on_caller_stream();
        }
      } else {
        std::shared_ptr<DeviceEvent> input = runtime_.record(op->stream());  // before the gate, on the stream
        op->set_order(std::move(input), completion ? nullptr : park(op->stream()));
      }
    }
  } catch (const Error& e) {
    comm_.fail_now(e.status(), e.what());  // the ranks are out of step: this rank has taken its sequence number
    throw;
  } catch (const std::bad_alloc&) {
    comm_.fail_now(BAGUA_ERR_SYSTEM, "out of memory enqueuing a device call");
    throw;
  }
  // Before it starts: it may lease more then (take_staging counts that), or took its block at the call.
  const size_t staging = op->held_bytes();
  if (!op->on_caller_stream()) op->wait_to_start();  // (one that staged at the call takes no idle block)
  {
    std::lock_guard<std::mutex> lock(mutex_);
    entries_.reserve(entries_.size() + 1);  // once started, op must reach the list: nothing may throw in between
  }
  comm_.start(*op);  // throws when the communicator is unusable; op's destructor then releases the stream
  std::lock_guard<std::mutex> lock(mutex_);
  submitted_bytes_ += staging;
  entries_.push_back(Entry{std::move(op), std::move(completion), staging > 0});
  changed_.notify_all();
}

void DeviceProxy::finish(Entry& entry, bagua_status_t status, std::string error) {
  try {
    comm_.forget(*entry.op);
  } catch (...) {
  }
  size_t bytes = entry.op->held_bytes();
  bool output_waits = entry.completion && status == BAGUA_SUCCESS && entry.op->on_caller_stream();
  if (output_waits) {
    std::lock_guard<std::mutex> lock(requests_mutex_);
    try {
      request_outputs_.reserve(request_outputs_.size() + 1);  // then nothing below throws
    } catch (...) {  // out of memory: the operation's destructor drains its staging; the request fails
      output_waits = false;
      status = BAGUA_ERR_SYSTEM;
      error = "out of memory handing a request's output over";
    }
    if (output_waits) request_outputs_.push_back(RequestOutput{entry.completion, entry.op->take_pending_output()});
  }
  entry.op.reset();  // waits for its copies, hands back staging, releases the stream and its claim
  {
    std::lock_guard<std::mutex> lock(mutex_);
    submitted_bytes_ -= bytes;
    changed_.notify_all();
  }
  if (entry.completion && status == BAGUA_SUCCESS && output_waits) {
    entry.completion->output_waits.store(true, std::memory_order_release);
  } else if (entry.completion) {
    entry.completion->status = status;
    entry.completion->error = error;
    entry.completion->done.store(true, std::memory_order_release);
  }
}

void DeviceProxy::heartbeat() {
  if (std::this_thread::get_id() == proxy_thread_id_.load()) heartbeat_ns_.store(steady_ns());  // (its own only)
}

void DeviceProxy::monitor() {
  const int64_t limit_ns = (comm_.config().timeout_ms + kMonitorMarginMs) * 1000000;
  std::unique_lock<std::mutex> lock(parked_mutex_);
  while (!monitor_stopping_) {
    monitor_wake_.wait_for(lock, std::chrono::milliseconds(100));
    if (monitor_stopping_ || parked_.empty()) continue;
    const int64_t stuck_ns = steady_ns() - heartbeat_ns_.load();
    if (stuck_ns < limit_ns) continue;
    // The flag first: the proxy thread, waking, must never see a released stream without it.
    int64_t expected = 0;
    const bool first =
        forced_open_after_ms_.compare_exchange_strong(expected, std::max<int64_t>(1, stuck_ns / 1000000));
    for (const ParkedGate& gate : parked_) __atomic_store_n(gate.word, gate.value, __ATOMIC_RELEASE);
    if (!first) continue;
    const size_t released = parked_.size();
    lock.unlock();
    BAGUA_WARN(
        "the device proxy thread has been inside one CUDA call for {:.1f} s with {} stream(s) parked on its "
        "gates: releasing them (the calls in flight fail, their output is undefined)",
        stuck_ns / 1e9, released);
    lock.lock();
  }
}

void DeviceProxy::report_forced_open(bagua_status_t* status, std::string* error) {
  const int64_t stuck_ms = forced_open_after_ms_.load();
  if (stuck_ms == 0) return;
  const std::string message = fmt::format(
      "the device proxy thread was inside a CUDA call for {:.1f} s while streams waited on its gates, so they were "
      "released and the device calls in flight failed; a thread waiting inside the CUDA driver for such a stream (a "
      "copy to or from pageable memory, a synchronize) can cause this (docs/cuda.md)",
      stuck_ms / 1000.0);
  if (!forced_open_reported_) {
    forced_open_reported_ = true;
    comm_.fail_now(BAGUA_ERR_TIMEOUT, message);
    heartbeat();
  }
  if (*status == BAGUA_SUCCESS) {
    *status = BAGUA_ERR_TIMEOUT;
    *error = message;
  }
}

void DeviceProxy::run() {
  proxy_thread_id_.store(std::this_thread::get_id());
  runtime_.enter_library_thread();
  Backoff backoff;
  std::vector<std::pair<DeviceOperation*, bool>> snapshot;  // (operation, holds staging)
  int current_device = -1;
  for (;;) {
    heartbeat();
    bool progressed = false;
    try {
      drain(false);
      if (forced_open_after_ms_.load() != 0 && !forced_open_reported_) {
        bagua_status_t status = BAGUA_SUCCESS;
        std::string error;
        report_forced_open(&status, &error);
      }
      {
        std::unique_lock<std::mutex> lock(mutex_);
        if (stopping_) return;
        if (entries_.empty()) {
          changed_.wait_for(lock, std::chrono::milliseconds(100));
          continue;
        }
        snapshot.clear();
        for (Entry& e : entries_) snapshot.emplace_back(e.op.get(), e.holds_staging);
      }
      // One progress of the communicator per pass (the first test of a running operation advances them all): a
      // progress per test cost O(n^2) per pass, and 1000 calls queued on a stream took minutes to drain.
      Comm::TestPass pass;
      for (const auto& item : snapshot) {
        DeviceOperation* const op = item.first;
        const bool holds_staging = item.second;
        bagua_status_t status = BAGUA_SUCCESS;
        std::string error;
        bool done = false;
        try {
          if (op->makes_device_calls() && op->device() != current_device) {  // its CUDA calls go to its device
            try {
              runtime_.set_device(op->device());
              current_device = op->device();
            } catch (const Error& e) {
              // The operation may have transfers in flight: fail the communicator (which cancels them) and let
              // test() report it, rather than ending the operation here.
              comm_.fail_now(e.status(), fmt::format("device proxy thread: {}", e.what()));
            }
          }
          done = comm_.test(*op, &pass);
          if (holds_staging && op->new_events_for_proxy()) staging_progress_.fetch_add(1);
        } catch (const Error& e) {
          done = true;
          status = e.status();
          error = e.what();
        }
        // Released by the monitor while this thread was stuck: the call's output is undefined, whatever it says.
        heartbeat();
        report_forced_open(&status, &error);
        if (!done) continue;
        progressed = true;
        Entry entry;
        {
          std::lock_guard<std::mutex> lock(mutex_);
          auto it = std::find_if(entries_.begin(), entries_.end(), [&](const Entry& e) { return e.op.get() == op; });
          entry = std::move(*it);
          entries_.erase(it);
        }
        finish(entry, status, error);
        heartbeat();
      }
    } catch (const std::exception& e) {
      // Out of memory or a CUDA failure outside an operation: fail the communicator; its operations then end.
      comm_.fail_now(BAGUA_ERR_INTERNAL, fmt::format("device proxy thread: {}", e.what()));
    } catch (...) {
      comm_.fail_now(BAGUA_ERR_INTERNAL, "device proxy thread: unknown exception");
    }
    try {
      close_pending(false);
    } catch (...) {
    }
    if (progressed)
      backoff.busy();
    else
      backoff.idle();
  }
}

void submit_device_group(std::vector<std::unique_ptr<DeviceOperation>> ops) {
  std::vector<Comm*> comms;
  for (auto& op : ops)
    if (std::find(comms.begin(), comms.end(), &op->proxy().comm()) == comms.end()) comms.push_back(&op->proxy().comm());
  try {
    // One input position per stream, recorded before any gate on it, and the input copies of the calls staged on
    // their caller's stream: on every stream before any gate (the legacy default stream waits for blocking ones).
    std::vector<std::pair<DeviceStream, std::shared_ptr<DeviceEvent>>> inputs;
    for (auto& op : ops) {
      auto found = std::find_if(inputs.begin(), inputs.end(), [&](const auto& in) { return in.first == op->stream(); });
      if (found == inputs.end()) inputs.emplace_back(op->stream(), device_runtime().record(op->stream()));
    }
    for (auto& op : ops)  // (their gates inside the group's input would order calls behind each other's rounds)
      if (op->computes_on_caller_stream())
        bagua::fail(BAGUA_ERR_INTERNAL, "{}: device phases in a group", op->description());
    std::vector<DeviceOperation*> on_caller_stream;
    for (auto& op : ops)
      if (!op->ordered() && op->can_stage_on_caller_stream()) {
        op->enqueue_input_on_caller_stream();
        on_caller_stream.push_back(op.get());
      }
    // Then one gate per (communicator, stream).
    for (size_t i = 0; i < ops.size(); ++i) {
      if (ops[i]->ordered()) continue;
      std::shared_ptr<DeviceEvent> input;
      for (auto& in : inputs)
        if (in.first == ops[i]->stream()) input = in.second;
      std::shared_ptr<StreamGate> gate = ops[i]->proxy().park(ops[i]->stream());
      for (size_t j = i; j < ops.size(); ++j)
        if (ops[j]->stream() == ops[i]->stream() && &ops[j]->proxy() == &ops[i]->proxy())
          ops[j]->set_order(ops[j]->on_caller_stream() ? nullptr : input, gate);
    }
    // Then their output copies, after every gate.
    for (DeviceOperation* op : on_caller_stream) op->enqueue_output_on_caller_stream();
  } catch (const Error& e) {
    for (Comm* c : comms) c->fail_now(e.status(), e.what());
    throw;
  } catch (const std::bad_alloc&) {
    for (Comm* c : comms) c->fail_now(BAGUA_ERR_SYSTEM, "out of memory enqueuing device calls");
    throw;
  }
  std::exception_ptr first;
  for (auto& op : ops) {
    DeviceProxy& proxy = op->proxy();
    try {
      proxy.submit(std::move(op));
    } catch (...) {
      if (!first) first = std::current_exception();
    }
  }
  if (first) std::rethrow_exception(first);
}

}  // namespace bagua

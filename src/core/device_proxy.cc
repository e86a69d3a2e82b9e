#include "core/device_proxy.h"

#include <algorithm>
#include <chrono>

#include "base/backoff.h"
#include "base/error.h"
#include "base/logging.h"
#include "core/comm.h"

namespace bagua {

namespace {

constexpr uint32_t kGateWordsPerPage = 1024;

// Streams with device work in flight, per process: (stream, communicator id) -> the rank using it.
std::mutex g_stream_mutex;
std::map<std::pair<DeviceStream, uint64_t>, std::pair<int, int>> g_stream_users;  // -> (rank, operations)

void note_stream_use(DeviceStream stream, uint64_t comm_id, int rank, int delta) {
  std::lock_guard<std::mutex> lock(g_stream_mutex);
  auto& use = g_stream_users[{stream, comm_id}];
  use.first = rank;
  use.second += delta;
  if (use.second <= 0) g_stream_users.erase({stream, comm_id});
}

}  // namespace

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
  if (pool_ != nullptr && ptr_ != nullptr) pool_->give_back(ptr_, bytes_);
  pool_ = nullptr;
  ptr_ = nullptr;
  bytes_ = 0;
}

StreamGate& StreamGate::operator=(StreamGate&& other) noexcept {
  if (this != &other) {
    release();
    std::swap(owner_, other.owner_);
    std::swap(slot_, other.slot_);
    std::swap(value_, other.value_);
  }
  return *this;
}

void StreamGate::release() {
  if (owner_ != nullptr) owner_->release_slot(slot_, value_);
  owner_ = nullptr;
}

// ---- the operation ----

DeviceOperation::DeviceOperation(bagua_opkind_t kind, DeviceProxy& proxy, DeviceStream stream, int device,
                                 StagingLease staging)
    : Operation(kind, "device operation"),
      proxy_(proxy),
      stream_(stream),
      device_(device),
      staging_(std::move(staging)) {}

DeviceOperation::~DeviceOperation() {
  // Never hand back staging that a copy still uses, nor release the stream before our copy into its buffer ends.
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(proxy_.comm().config().timeout_ms);
  while (!quiescent()) {
    if (std::chrono::steady_clock::now() > deadline) {
      BAGUA_ERROR("{}: a staging copy did not finish; leaking its staging block", description());
      new StagingLease(std::move(staging_));  // leaked on purpose: the copy may still touch it
      break;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  host_op_.reset();
  gate_.reset();  // the last operation of its group on this stream releases it
}

void DeviceOperation::set_gate(std::shared_ptr<DeviceEvent> input_ready, std::shared_ptr<StreamGate> gate) {
  input_ready_ = std::move(input_ready);
  gate_ = std::move(gate);
}

void DeviceOperation::set_host_operation(std::function<std::unique_ptr<Operation>()> build, std::string description) {
  build_ = std::move(build);
  set_description(std::move(description));
}

bool DeviceOperation::quiescent() {
  try {
    return copies_done_ == nullptr || copies_done_->done();
  } catch (const Error&) {
    return true;  // the copy stream failed: nothing more will run on it
  }
}

void DeviceOperation::issue(const std::vector<DeviceCopy>& copies) {
  DeviceStream copy_stream = proxy_.copy_stream(device_);
  for (const DeviceCopy& c : copies)
    if (c.bytes > 0) proxy_.runtime().copy_async(c.dst, c.src, c.bytes, copy_stream);
  copies_done_ = proxy_.runtime().record(copy_stream);
}

void DeviceOperation::advance(Transport& transport) {
  switch (phase_) {
    case Phase::kWaitInput:
      if (!input_ready_->done()) return;
      issue(copies_in_);
      phase_ = Phase::kCopyIn;
      note_progress();
      [[fallthrough]];
    case Phase::kCopyIn:
      if (!copies_done_->done()) return;
      host_op_ = build_();
      phase_ = Phase::kRun;
      note_progress();
      [[fallthrough]];
    case Phase::kRun: {
      host_op_->advance(transport);
      if (host_op_->events() != host_events_) {
        note_progress();
        host_events_ = host_op_->events();
      }
      add_bytes_sent(host_op_->bytes_sent() - host_bytes_);
      host_bytes_ = host_op_->bytes_sent();
      if (host_op_->state() == State::kFailed) throw Error(host_op_->status(), host_op_->error());
      if (host_op_->running()) return;
      issue(copies_out_);
      phase_ = Phase::kCopyOut;
      note_progress();
      [[fallthrough]];
    }
    case Phase::kCopyOut:
      if (!copies_done_->done()) return;
      phase_ = Phase::kDone;
      finish();
      return;
    case Phase::kDone: return;
  }
}

std::string DeviceOperation::waiting_for() const {
  switch (phase_) {
    case Phase::kWaitInput: return "the work before it on the caller's stream";
    case Phase::kCopyIn: return "the copy of its input from device memory";
    case Phase::kRun: return host_op_->waiting_for();
    case Phase::kCopyOut: return "the copy of its output to device memory";
    case Phase::kDone: break;
  }
  return "nothing";
}

// ---- the proxy ----

DeviceProxy::DeviceProxy(Comm& comm) : comm_(comm), runtime_(device_runtime()) {
  thread_ = std::thread([this] { run(); });
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
  for (Entry& e : entries_) finish(e, BAGUA_ERR_ABORTED, "the communicator was destroyed");
  entries_.clear();
  for (auto& [device, stream] : copy_streams_) runtime_.destroy_stream(stream);
  for (auto& [bytes, ptr] : free_blocks_) runtime_.free_mapped(ptr);
  for (uint32_t* page : gate_pages_) runtime_.free_mapped(page);
}

void DeviceProxy::check_stream(DeviceStream stream) const {
  if (runtime_.stream_capturing(stream))
    fail(BAGUA_ERR_NOT_SUPPORTED,
         "the stream is being captured into a CUDA graph; bagua device calls cannot be captured (docs/cuda.md)");
  std::lock_guard<std::mutex> lock(g_stream_mutex);
  auto it = g_stream_users.find({stream, comm_.id()});
  if (it != g_stream_users.end() && it->second.first != comm_.rank())
    fail(BAGUA_ERR_INVALID_USAGE,
         "rank {} of this communicator has device work in flight on the same stream{}; ranks that are threads of one "
         "process need a stream each, or they wait on each other",
         it->second.first, stream == nullptr ? " (the legacy default stream)" : "");
}

StagingLease DeviceProxy::lease(size_t bytes) {
  bytes = std::max<size_t>((bytes + 255) & ~size_t{255}, 256);
  const size_t limit = comm_.config().device_memory_limit;
  if (bytes > limit)
    fail(BAGUA_ERR_SYSTEM,
         "a device call needs {} bytes of staging memory, more than BAGUA_DEVICE_MEMORY_LIMIT ({} bytes) allows", bytes,
         limit);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(comm_.config().timeout_ms);
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    auto it = free_blocks_.lower_bound(bytes);
    if (it != free_blocks_.end() && it->first <= 2 * bytes) {
      StagingLease lease(this, it->second, it->first);
      leased_bytes_ += it->first;
      free_blocks_.erase(it);
      return lease;
    }
    // Make room: free idle blocks that do not fit.
    while (pool_bytes_ + bytes > limit && !free_blocks_.empty()) {
      auto victim = std::prev(free_blocks_.end());
      runtime_.free_mapped(victim->second);
      pool_bytes_ -= victim->first;
      free_blocks_.erase(victim);
    }
    if (pool_bytes_ + bytes <= limit) {
      void* p = runtime_.alloc_mapped(bytes);
      if (p == nullptr)
        fail(BAGUA_ERR_SYSTEM, "out of memory: could not allocate {} bytes of pinned staging memory", bytes);
      pool_bytes_ += bytes;
      leased_bytes_ += bytes;
      return StagingLease(this, p, bytes);
    }
    if (changed_.wait_until(lock, deadline) == std::cv_status::timeout)
      fail(BAGUA_ERR_TIMEOUT,
           "a device call waited {:.1f} s for {} bytes of staging memory; operations in flight hold {} of "
           "BAGUA_DEVICE_MEMORY_LIMIT = {} bytes",
           comm_.config().timeout_ms / 1000.0, bytes, leased_bytes_, limit);
  }
}

void DeviceProxy::give_back(void* ptr, size_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  free_blocks_.emplace(bytes, ptr);
  leased_bytes_ -= bytes;
  changed_.notify_all();
}

std::pair<std::shared_ptr<DeviceEvent>, std::shared_ptr<StreamGate>> DeviceProxy::gate(DeviceStream stream) {
  std::shared_ptr<DeviceEvent> input_ready = runtime_.record(stream);
  uint32_t slot, value;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (free_slots_.empty()) {
      auto* page = static_cast<uint32_t*>(runtime_.alloc_mapped(kGateWordsPerPage * sizeof(uint32_t)));
      if (page == nullptr) fail(BAGUA_ERR_SYSTEM, "out of memory: could not allocate a page of stream gates");
      std::fill(page, page + kGateWordsPerPage, 0u);
      uint32_t first = static_cast<uint32_t>(gate_generation_.size());
      gate_pages_.push_back(page);
      gate_generation_.resize(gate_generation_.size() + kGateWordsPerPage, 0);
      for (uint32_t i = kGateWordsPerPage; i-- > 0;) free_slots_.push_back(first + i);
    }
    slot = free_slots_.back();
    free_slots_.pop_back();
    value = ++gate_generation_[slot];
  }
  auto gate = std::make_shared<StreamGate>(this, slot, value);  // released (a no-op) if wait_value throws
  runtime_.wait_value(stream, &gate_pages_[slot / kGateWordsPerPage][slot % kGateWordsPerPage], value);
  return {std::move(input_ready), std::move(gate)};
}

void DeviceProxy::release_slot(uint32_t slot, uint32_t value) {
  std::lock_guard<std::mutex> lock(mutex_);
  __atomic_store_n(&gate_pages_[slot / kGateWordsPerPage][slot % kGateWordsPerPage], value, __ATOMIC_RELEASE);
  free_slots_.push_back(slot);
}

DeviceStream DeviceProxy::copy_stream(int device) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = copy_streams_.find(device);
  if (it != copy_streams_.end()) return it->second;
  DeviceStream stream = runtime_.create_stream(device);
  copy_streams_[device] = stream;
  return stream;
}

void DeviceProxy::submit_group(std::vector<std::unique_ptr<DeviceOperation>> ops) {
  for (size_t i = 0; i < ops.size(); ++i) {
    if (ops[i]->gated()) continue;
    std::pair<std::shared_ptr<DeviceEvent>, std::shared_ptr<StreamGate>> shared;
    try {
      shared = gate(ops[i]->stream());
    } catch (const Error& e) {
      comm_.poison(e.status(), e.what());
      throw;
    }
    for (size_t j = i; j < ops.size(); ++j)
      if (ops[j]->stream() == ops[i]->stream()) ops[j]->set_gate(shared.first, shared.second);
  }
  for (auto& op : ops) submit(std::move(op));
}

void DeviceProxy::submit(std::unique_ptr<DeviceOperation> op, std::shared_ptr<DeviceCompletion> completion) {
  if (!op->gated()) {
    try {
      auto [input_ready, gate_of_op] = gate(op->stream());
      op->set_gate(std::move(input_ready), std::move(gate_of_op));
    } catch (const Error& e) {
      comm_.poison(e.status(), e.what());  // the ranks are out of step: this rank has taken its sequence number
      throw;
    }
  }
  comm_.start(*op);  // throws when the communicator is unusable; op's destructor then releases the stream
  note_stream_use(op->stream(), comm_.id(), comm_.rank(), +1);
  std::lock_guard<std::mutex> lock(mutex_);
  entries_.push_back(Entry{std::move(op), std::move(completion)});
  changed_.notify_all();
}

size_t DeviceProxy::in_flight() {
  std::lock_guard<std::mutex> lock(mutex_);
  return entries_.size();
}

void DeviceProxy::finish(Entry& entry, bagua_status_t status, const std::string& error) {
  comm_.forget(*entry.op);
  note_stream_use(entry.op->stream(), comm_.id(), comm_.rank(), -1);
  entry.op.reset();  // waits for its copies, hands back staging, releases the stream
  if (entry.completion) {
    entry.completion->status = status;
    entry.completion->error = error;
    entry.completion->done.store(true, std::memory_order_release);
  }
}

void DeviceProxy::run() {
  runtime_.enter_library_thread();
  Backoff backoff;
  std::vector<DeviceOperation*> snapshot;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      if (entries_.empty()) {
        if (stopping_) return;
        changed_.wait_for(lock, std::chrono::milliseconds(100));
        continue;
      }
      snapshot.clear();
      for (Entry& e : entries_) snapshot.push_back(e.op.get());
    }
    bool progressed = false;
    for (DeviceOperation* op : snapshot) {
      bagua_status_t status = BAGUA_SUCCESS;
      std::string error;
      bool done = false;
      try {
        done = comm_.test(*op);
      } catch (const Error& e) {
        done = true;
        status = e.status();
        error = e.what();
      }
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
      std::lock_guard<std::mutex> lock(mutex_);
      changed_.notify_all();
    }
    if (progressed)
      backoff.busy();
    else
      backoff.idle();
  }
}

}  // namespace bagua

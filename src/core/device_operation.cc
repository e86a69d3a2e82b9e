// DeviceOperation (core/device_proxy.h): one device call's copies and staging around its host operation, on the
// caller's stream or, for the calls that cannot stage there, on the proxy's copy stream (docs/cuda.md).
#include <algorithm>
#include <chrono>
#include <optional>
#include <thread>

#include "base/error.h"
#include "core/comm.h"
#include "core/device_proxy.h"  // (DeviceOperation is declared with the proxy it belongs to)

namespace bagua {

namespace {

bool word_reached(const volatile uint32_t* word, uint32_t value) {
  const uint32_t now = __atomic_load_n(const_cast<const uint32_t*>(word), __ATOMIC_ACQUIRE);
  return static_cast<int32_t>(now - value) >= 0;
}

}  // namespace

bool StreamSignal::reached() const { return word != nullptr && word_reached(word, value); }

DeviceOperation::DeviceOperation(bagua_opkind_t kind, DeviceProxy& proxy, DeviceStream stream, int device,
                                 StagingLease staging)
    : Operation(kind, "device operation"),
      proxy_(proxy),
      stream_(stream),
      device_(device),
      staging_(std::move(staging)) {}

DeviceOperation::~DeviceOperation() {
  // Staged on the caller's stream: the stream copies the output back after the gate, which the last operation of the
  // group releases (below, or later); the proxy thread hands the staging back once those copies have run.
  if (on_caller_stream_ && (input_signalled_ || enqueue_broken_)) {
    std::shared_ptr<StagingLease> block =
        shared_staging_ ? std::move(shared_staging_) : std::make_shared<StagingLease>(std::move(staging_));
    // Device phases that the stream has not run yet (the call failed): what the builder holds (a qstate's count of
    // queued calls, which keeps its error feedback in place) stays held until the stream has run them.
    std::shared_ptr<void> keep_alive;
    bool broken = enqueue_broken_;
    try {
      if (std::any_of(phase_words_.begin(), phase_words_.end(), [](const StreamSignal& w) { return !w.reached(); }))
        keep_alive = std::make_shared<std::function<std::unique_ptr<Operation>()>>(std::move(build_));
      if (timed_phases_ > 0 && !broken) {  // timed: read once the output word is written (drain)
        auto times = std::make_shared<PhaseTimes>();
        times->block = block;
        times->held = std::move(keep_alive);
        times->stamps = reinterpret_cast<const uint64_t*>(block->data() + timestamps_at_);  // (staging_ moved)
        times->phases = timed_phases_;
        times->comm = &proxy_.comm();  // (last: armed)
        keep_alive = std::move(times);
      }
      if (!held_until_output_.empty()) {
        auto all = std::make_shared<std::vector<std::shared_ptr<void>>>(std::move(held_until_output_));
        if (keep_alive) all->push_back(std::move(keep_alive));
        keep_alive = std::move(all);
      }
    } catch (...) {  // out of memory: nothing here is reused (as after a broken enqueue)
      broken = true;
    }
    const StreamSignal until = output_signalled_      ? output_signal_
                               : phase_words_.empty() ? input_signal_
                                                      : phase_words_.back();  // (the last word enqueued)
    proxy_.drain_later(std::move(block), std::move(signals_), until, broken, nullptr, std::move(keep_alive));
    input_signalled_ = output_signalled_ = false;
  } else if (on_caller_stream_) {  // nothing enqueued
    for (const StreamSignal& signal : signals_) proxy_.give_back_signal(signal);
  }
  signals_.clear();
  // Never hand back staging that a copy still uses, nor release the stream before our copy into its buffer ends.
  try {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(proxy_.comm().config().timeout_ms);
    while (!quiescent()) {
      if (std::chrono::steady_clock::now() > deadline) {
        // The GPU did not finish a plain copy within the timeout: keep the staging (the copy may still touch it),
        // fail the communicator, and release the stream so that nothing hangs.
        new StagingLease(std::move(staging_));
        new StagingLease(std::move(device_room_));
        device_scratch_ = nullptr;
        proxy_.comm().fail_now(BAGUA_ERR_CUDA,
                               fmt::format("{}: a staging copy did not finish within BAGUA_TIMEOUT", description()));
        break;
      }
      proxy_.heartbeat();  // each wait for the copies is one call: the monitor times calls, not this loop
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    host_op_.reset();
    if (device_scratch_ != nullptr) proxy_.runtime().free_device_async(device_scratch_, proxy_.copy_stream(device_));
  } catch (...) {
  }
  // The staging goes back to the pool before the stream goes on: the stream's next call, starting, finds it idle.
  staging_.reset();
  note_started();  // (if it ended before its input was ready)
  // What the builder holds (a qstate's queued count) is given back before the stream goes on: a caller that
  // synchronized the stream may use the state at once.
  build_ = nullptr;
  for (Piece& p : out_pieces_) p.gate.reset();  // (released before the call's gate, which the stream reaches after)
  for (auto& g : phase_gates_) g.reset();
  gate_.reset();  // the last operation of its group on this stream releases it
  // Scratch ordered on the caller's stream whose free was not enqueued (the call failed before): freed after what was
  // enqueued, except by the proxy thread (it makes no CUDA call; the scratch is then lost).
  if (stream_scratch_ != nullptr && !stream_scratch_freed_ && !proxy_.on_proxy_thread()) {
    try {
      proxy_.runtime().free_device_async(stream_scratch_, stream_);
    } catch (...) {
    }
  }
}

void DeviceOperation::compute_on_caller_stream(size_t stream_scratch_bytes, size_t timestamps_at) {
  computes_on_caller_stream_ = true;
  timestamps_at_ = timestamps_at;
  if (stream_scratch_bytes == 0) return;
  device_room_ = proxy_.lease(stream_scratch_bytes, false);  // room only: the memory is the device's
  void* p = nullptr;
  try {
    p = proxy_.runtime().alloc_device_async(stream_scratch_bytes, stream_);
  } catch (...) {
    device_room_.reset();
    throw;
  }
  if (p == nullptr) {
    device_room_.reset();
    bagua::fail(BAGUA_ERR_SYSTEM, "out of memory: could not allocate {} bytes of device memory on device {}",
                stream_scratch_bytes, device_);
  }
  stream_scratch_ = p;
}

DeviceOperation::PhaseTimes::~PhaseTimes() {
  if (comm != nullptr) comm->add_compute_ns(phases_ns(stamps, phases));
}

uint64_t DeviceOperation::phases_ns(const uint64_t* timestamps, size_t phases) {
  uint64_t total = 0;
  for (size_t k = 0; k < phases; ++k) {
    const uint64_t begin = timestamps[2 * k], end = timestamps[2 * k + 1];
    if (end > begin) total += end - begin;
  }
  return total;
}

void DeviceOperation::open_phase(size_t k) {
  if (k < phase_gates_.size() && phase_gates_[k]) {
    phase_gates_[k]->release();
    phase_gates_[k].reset();
  }
}

void DeviceOperation::take_device_scratch(size_t bytes) {
  if (bytes == 0) return;
  device_room_ = proxy_.lease(bytes, false);  // room only: the memory is the device's, not pinned
  void* p = nullptr;
  try {
    p = proxy_.runtime().alloc_device_async(bytes, proxy_.copy_stream(device_));
  } catch (...) {
    device_room_.reset();
    throw;
  }
  if (p == nullptr) {
    device_room_.reset();
    bagua::fail(BAGUA_ERR_SYSTEM, "out of memory: could not allocate {} bytes of device memory on device {}", bytes,
                device_);
  }
  device_scratch_ = p;
}

void DeviceOperation::set_order(std::shared_ptr<DeviceEvent> input_ready, std::shared_ptr<StreamGate> gate) {
  ordered_ = true;
  input_ready_ = std::move(input_ready);
  gate_ = std::move(gate);
}

void DeviceOperation::set_host_operation(std::function<std::unique_ptr<Operation>()> build, std::string description) {
  build_ = std::move(build);
  set_description(std::move(description));
}

bool DeviceOperation::quiescent() {
  if (copies_unknown_) return false;
  try {
    return copies_done_ == nullptr || copies_done_->done();
  } catch (const Error&) {
    return true;  // the copy stream failed: nothing more runs on it
  }
}

void DeviceOperation::copy_all(const std::vector<DeviceCopy>& copies, DeviceStream stream) {
  for (const DeviceCopy& c : copies)
    if (c.bytes > 0) proxy_.runtime().copy_async(c.dst, c.src, c.bytes, stream);
}

void DeviceOperation::refuse_if_released() const {
  if (proxy_.streams_released())
    bagua::fail(BAGUA_ERR_TIMEOUT, "{}: its stream was released by the device proxy's monitor; no more device work",
                description());
}

void DeviceOperation::issue(const std::function<void(DeviceStream)>& launch) {
  refuse_if_released();
  DeviceStream copy_stream = proxy_.copy_stream(device_);
  copies_done_.reset();
  copies_unknown_ = true;  // until the event that covers this work is recorded
  std::exception_ptr failure;
  try {
    launch(copy_stream);
  } catch (...) {
    failure = std::current_exception();
  }
  copies_done_ = proxy_.runtime().record(copy_stream);  // also after a failure: it covers what was issued
  copies_unknown_ = false;
  if (failure) std::rethrow_exception(failure);
}

IpcCache& DeviceOperation::ipc_cache() { return proxy_.ipc_cache(); }

namespace {
// Pipelined staging from 4 MiB of input or output, in pieces of at least 1 MiB, at most 16 per copy.
constexpr size_t kPipelineMinBytes = 4 << 20;
constexpr size_t kPipelinePieceMinBytes = 1 << 20;
constexpr size_t kPipelineMaxPieces = 16;
}  // namespace

// With BAGUA_DEVICE_DATA_PATH=stream, any call whose staging is laid out at its start (not an in-host algorithm's
// call, not a relaxation that computes on the device; those need the proxy's data path).
bool DeviceOperation::can_stage_on_caller_stream() const {
  return proxy_.comm().config().device_path_on_stream && lay_out_ && !deferred_ && build_ != nullptr &&
         device_scratch_ == nullptr;  // (its host operation touches no device memory: HostMemoryOnlyThread)
}

bool DeviceOperation::pipelines_copies() const {
  if (!pipeline_allowed_ || deferred_ || !proxy_.pipelined_staging()) return false;
  size_t in_bytes = 0, out_bytes = 0;
  for (const DeviceCopy& c : copies_in_) in_bytes += c.bytes;
  for (const DeviceCopy& c : copies_out_) out_bytes += c.bytes;
  return std::max(in_bytes, out_bytes) >= kPipelineMinBytes;
}

void DeviceOperation::enqueue_input_on_caller_stream() {
  // (a call that computes on the stream writes its block at the call: never one that an earlier call still uses)
  if (auto block = computes_on_caller_stream_ ? nullptr : proxy_.block_passed_along(stream_, staging_.bytes())) {
    // The stream's last call's block: this call's copies into it run after that call's gate.
    staging_.reset();  // (the room goes back)
    shared_staging_ = std::move(block);
    auto lay_out = std::move(lay_out_);
    lay_out_ = nullptr;
    lay_out(*this);
  } else {
    const size_t before = held_bytes();
    take_staging();  // the block and the copies' layout, now
    // fill() counted the block's growth as a submitted operation's; submit() counts the whole block.
    proxy_.uncount_submitted_staging(held_bytes() - before);
  }
  if (computes_on_caller_stream_) {
    enqueue_phases_before_gate();
    return;
  }
  if (pipelines_copies()) split_into_pieces();
  on_caller_stream_ = true;  // from here the destructor gives the signals back
  // Every word first: a word per input piece (at least one), and the output word.
  signals_.reserve(in_pieces_.size() + 2);
  for (Piece& p : in_pieces_) {
    p.signal = proxy_.take_signal();
    signals_.push_back(p.signal);
  }
  if (in_pieces_.empty()) {
    input_signal_ = proxy_.take_signal();
    signals_.push_back(input_signal_);
  }
  output_signal_ = proxy_.take_signal();
  signals_.push_back(output_signal_);
  if (in_pieces_.empty()) {
    first_input_signal_ = input_signal_;
    enqueue_copies_then_signal(copies_in_, input_signal_);
  } else {
    first_input_signal_ = in_pieces_.front().signal;
    input_signal_ = in_pieces_.back().signal;
    for (Piece& p : in_pieces_) {
      enqueue_copies_then_signal({p.copy}, p.signal);
      p.issued = true;
    }
  }
  input_signalled_ = true;
}

PendingOutput DeviceOperation::take_pending_output() {
  PendingOutput out;
  out.device = device_;
  out.staging = shared_staging_ ? std::move(shared_staging_) : std::make_shared<StagingLease>(std::move(staging_));
  out.copies = copies_out_;  // (whole: they go at once)
  out.signals = std::move(signals_);
  signals_.clear();
  out.output = output_signal_;
  input_signalled_ = false;  // handed over: the destructor drains nothing
  return out;
}

void DeviceOperation::enqueue_output_pieces_on_caller_stream() {
  if (out_pieces_.empty()) return;
  enqueue_broken_ = true;  // a copy behind a gate, whose output word is not enqueued yet
  for (Piece& p : out_pieces_) {
    p.gate = proxy_.park(stream_);
    enqueue_copies({p.copy});
    p.issued = true;
  }
}

void DeviceOperation::enqueue_phases_before_gate() {
  if (phases_.size() < 2 || phases_.size() > kMaxTimedPhases)
    bagua::fail(BAGUA_ERR_INTERNAL, "{}: {} device phases", description(), phases_.size());
  on_caller_stream_ = true;  // from here the destructor gives the signals back
  signals_.reserve(phases_.size());
  phase_words_.reserve(phases_.size() - 1);
  for (size_t k = 0; k + 1 < phases_.size(); ++k) {
    phase_words_.push_back(proxy_.take_signal());
    signals_.push_back(phase_words_.back());
  }
  output_signal_ = proxy_.take_signal();
  signals_.push_back(output_signal_);
  first_input_signal_ = input_signal_ = phase_words_.front();
  phase_gates_.resize(phases_.size() - 1);
  enqueue_broken_ = true;  // until the last word before the gate is enqueued
  DeviceRuntime& runtime = proxy_.runtime();
  for (size_t k = 0; k + 1 < phases_.size(); ++k) {
    if (k > 0) phase_gates_[k] = proxy_.park(stream_);
    if (timestamps_at_ != kNoTimestamps) runtime.write_timestamp(stream_, timestamps() + 2 * k);
    phases_[k](stream_);
    if (timestamps_at_ != kNoTimestamps) runtime.write_timestamp(stream_, timestamps() + 2 * k + 1);
    runtime.write_value(stream_, phase_words_[k].word, phase_words_[k].value);
  }
  enqueue_broken_ = false;
  input_signalled_ = true;
}

void DeviceOperation::enqueue_last_phase() {
  enqueue_broken_ = true;  // until the output word is enqueued
  const size_t last = phases_.size() - 1;
  if (timestamps_at_ != kNoTimestamps) proxy_.runtime().write_timestamp(stream_, timestamps() + 2 * last);
  phases_.back()(stream_);
  if (timestamps_at_ != kNoTimestamps) proxy_.runtime().write_timestamp(stream_, timestamps() + 2 * last + 1);
  if (timestamps_at_ != kNoTimestamps) timed_phases_ = phases_.size();
  if (stream_scratch_ != nullptr) {
    proxy_.runtime().free_device_async(stream_scratch_, stream_);
    stream_scratch_freed_ = true;
  }
  proxy_.runtime().write_value(stream_, output_signal_.word, output_signal_.value);
  enqueue_broken_ = false;
  output_signalled_ = true;
  phases_.clear();  // enqueued: what the closures hold is no longer needed
}

void DeviceOperation::enqueue_output_on_caller_stream() {
  if (computes_on_caller_stream_) {
    enqueue_last_phase();
    return;
  }
  std::vector<DeviceCopy> copies;
  if (out_pieces_.empty()) copies = copies_out_;
  for (const Piece& p : out_pieces_)
    if (!p.issued) copies.push_back(p.copy);
  enqueue_copies_then_signal(copies, output_signal_);
  output_signalled_ = true;
  // Its gate is parked before these copies: a later call on the stream may use the block.
  if (!shared_staging_) shared_staging_ = std::make_shared<StagingLease>(std::move(staging_));
  proxy_.pass_block_along(stream_, shared_staging_);
}

void DeviceOperation::enqueue_copies(const std::vector<DeviceCopy>& copies) {
  DeviceRuntime& runtime = proxy_.runtime();
  const bool by_kernel = runtime.kernel_copies_on(stream_, device_);
  for (const DeviceCopy& c : copies) runtime.staging_copy_async(c.dst, c.src, c.bytes, stream_, by_kernel);
}

void DeviceOperation::enqueue_copies_then_signal(const std::vector<DeviceCopy>& copies, const StreamSignal& signal) {
  enqueue_broken_ = true;  // until the signal that covers these copies is enqueued
  enqueue_copies(copies);
  proxy_.runtime().write_value(stream_, signal.word, signal.value);
  enqueue_broken_ = false;
}

void DeviceOperation::start_pipeline() {
  pipelined_ = true;
  split_into_pieces();
  issue_pieces(in_pieces_, 0, in_pieces_.size(), true);
}

void DeviceOperation::split_into_pieces() {
  auto split = [](const std::vector<DeviceCopy>& copies, std::vector<Piece>& pieces) {
    for (const DeviceCopy& c : copies) {
      if (c.bytes == 0) continue;
      const size_t piece = std::max(kPipelinePieceMinBytes, (c.bytes + kPipelineMaxPieces - 1) / kPipelineMaxPieces);
      for (size_t at = 0; at < c.bytes; at += piece) {
        pieces.emplace_back();
        pieces.back().copy = {static_cast<uint8_t*>(c.dst) + at, static_cast<const uint8_t*>(c.src) + at,
                              std::min(piece, c.bytes - at)};
      }
    }
  };
  split(copies_in_, in_pieces_);
  split(copies_out_, out_pieces_);
  for (const Piece& p : out_pieces_) output_ranges_.push_back({static_cast<const uint8_t*>(p.copy.src), p.copy.bytes});
}

void DeviceOperation::issue_pieces(std::vector<Piece>& pieces, size_t first, size_t last, bool events) {
  refuse_if_released();
  DeviceStream copy_stream = proxy_.copy_stream(device_);
  DeviceRuntime& runtime = proxy_.runtime();
  copies_done_.reset();
  copies_unknown_ = true;  // until the event that covers these copies is recorded
  std::exception_ptr failure;
  try {
    for (size_t i = first; i < last; ++i) {
      if (pieces[i].issued) continue;
      pieces[i].issued = true;
      runtime.copy_async(pieces[i].copy.dst, pieces[i].copy.src, pieces[i].copy.bytes, copy_stream);
      if (events) pieces[i].done = runtime.record(copy_stream);
    }
  } catch (...) {
    failure = std::current_exception();
  }
  copies_done_ = runtime.record(copy_stream);  // the last on the stream: covers every copy issued so far
  copies_unknown_ = false;
  if (failure) std::rethrow_exception(failure);
}

bool DeviceOperation::arrived(const std::vector<Range>& ranges) {
  for (const Range& r : ranges)
    for (Piece& p : in_pieces_) {
      if (p.arrived) continue;
      const auto* piece = static_cast<const uint8_t*>(p.copy.dst);
      if (!(r.data < piece + p.copy.bytes && piece < r.data + r.bytes)) continue;
      if (!p.issued || !p.copied()) return false;
      p.arrived = true;
      ++arrived_pieces_;
    }
  overlapped_steps_ += arrived_pieces_ < in_pieces_.size() ? 1 : 0;  // one step, starting before all input is in
  return true;
}

bool DeviceOperation::arrived_all() {
  for (Piece& p : in_pieces_) {
    if (p.arrived) continue;
    if (!p.issued || !p.copied()) return false;
    p.arrived = true;
    ++arrived_pieces_;
  }
  return true;
}

void DeviceOperation::output_final(size_t piece, bool early) {
  if (piece >= out_pieces_.size()) return;
  Piece& p = out_pieces_[piece];
  if (on_caller_stream_) {  // its copy waits on the caller's stream behind a gate of its own (none in a group)
    if (!p.gate) return;
    p.gate->release();
    p.gate.reset();
  } else {
    if (p.issued) return;
    issue_pieces(out_pieces_, piece, piece + 1, false);
  }
  early_pieces_ += early ? 1 : 0;
}

void DeviceOperation::wait_to_start() {
  waits_to_start_ = true;
  proxy_.count_unstarted(1);
}

void DeviceOperation::note_started() {
  if (!waits_to_start_) return;
  waits_to_start_ = false;
  proxy_.count_unstarted(-1);
}

void DeviceOperation::defer_staging(std::function<void(DeviceOperation&)> lay_out) {
  deferred_ = true;
  lay_out_ = std::move(lay_out);
}

void DeviceOperation::take_staging() {
  proxy_.fill(staging_);  // (the lease may hold a block already)
  if (!lay_out_) return;
  auto lay_out = std::move(lay_out_);
  lay_out_ = nullptr;
  lay_out(*this);
}

void DeviceOperation::release_staging() {
  if (!lay_out_ || staging_.bytes() == 0) return;  // laid out: in use
  const size_t bytes = staging_.bytes();
  staging_.reset();
  proxy_.uncount_submitted_staging(bytes);
}

void DeviceOperation::advance(Transport& transport) {
  // Staged on the caller's stream, the host operation's buffers are the staging: its builder and steps detect memory
  // kinds without a driver call (one that a user thread waiting inside the driver could block).
  std::optional<HostMemoryOnlyThread> host_only;
  if (on_caller_stream_) host_only.emplace();
  switch (phase_) {
    case Phase::kWaitInput: {
      // Staged by the caller's stream, the operation makes no CUDA call: its first input word says the stream has
      // reached the call, the last one that the input is staged.
      if (on_caller_stream_ ? !first_input_signal_.reached() : !input_ready_->done()) return;
      phase_ = Phase::kCopyIn;
      note_progress();
      if (!deferred_ && !on_caller_stream_) take_staging();
      note_started();
      if (!on_caller_stream_) {
        if (pipelines_copies()) {
          host_op_ = build_();  // builders lay out steps on the staging; none reads it
          if (host_op_->pipelines_staging()) start_pipeline();
        }
        if (!deferred_ && !pipelined_) issue([this](DeviceStream s) { copy_all(copies_in_, s); });
      }
      [[fallthrough]];
    }
    case Phase::kCopyIn:
      if (on_caller_stream_ && !host_op_) {
        host_op_ = build_();  // builders lay out steps on the staging; none reads it
        pipelined_ = (!in_pieces_.empty() || !out_pieces_.empty()) && host_op_->pipelines_staging();
      }
      if (on_caller_stream_ && !pipelined_ && !input_signal_.reached()) return;
      if (!on_caller_stream_ && !deferred_ && !pipelined_ && !copies_done_->done()) return;
      if (!host_op_) host_op_ = build_();
      if (!collective_name()) set_algorithm(host_op_->collective_name(), host_op_->algorithm_name());  // relaxations
      phase_ = Phase::kRun;
      note_progress();
      [[fallthrough]];
    case Phase::kRun: {
      {
        StagingWindow::Scope window(pipelined_ ? static_cast<StagingWindow*>(this) : nullptr);
        host_op_->advance(transport);
      }
      if (host_op_->events() != host_events_) {
        note_progress();
        host_events_ = host_op_->events();
      }
      add_bytes_sent(host_op_->bytes_sent() - host_bytes_);
      host_bytes_ = host_op_->bytes_sent();
      if (host_op_->state() == State::kFailed) throw Error(host_op_->status(), host_op_->error());
      if (host_op_->running()) return;
      phase_ = Phase::kCopyOut;
      note_progress();
      if (!on_caller_stream_ && pipelined_) {
        proxy_.count_pipelined(early_pieces_, overlapped_steps_);
        issue_pieces(out_pieces_, 0, out_pieces_.size(), false);  // those no step reported final
      } else if (!on_caller_stream_ && (!deferred_ || copy_out_wanted_)) {
        issue([this](DeviceStream s) { copy_all(copies_out_, s); });
      }
      [[fallthrough]];
    }
    case Phase::kCopyOut:
      if (on_caller_stream_) {
        // A pipelined algorithm may end before pieces that no step touches are in: a request's output copies (not
        // ordered after them) and the staging's reuse wait for the last input word.
        if (!input_signal_.reached()) return;
        for (const StreamSignal& word : phase_words_)  // (the device work before the gate ends before the call)
          if (!word.reached()) return;
        // Done: the caller's stream copies the output back after the gates, the pieces' now, the call's once
        // ~DeviceOperation has handed everything back (as for any call); the proxy hands the staging back after
        // those copies.
        if (pipelined_) proxy_.count_pipelined(early_pieces_, overlapped_steps_);
        for (Piece& p : out_pieces_)
          if (p.gate) {
            p.gate->release();
            p.gate.reset();
          }
      } else if (copies_done_ && !copies_done_->done()) {
        return;
      }
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
    case Phase::kCopyOut:
      return on_caller_stream_ ? "the last copy of its input on the caller's stream"
                               : "the copy of its output to device memory";
    case Phase::kDone: break;
  }
  return "nothing";
}

}  // namespace bagua

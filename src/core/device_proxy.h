// The device data path's machinery (docs/cuda.md). A device call is a host operation on pinned staging memory,
// wrapped in a DeviceOperation that orders it against the user's stream:
//   user stream:  [earlier work] [input event] [gate: wait until the proxy releases it] [later work]
//   proxy:        input event done -> copy in (device -> staging) -> host operation -> copy out -> release gate
// Each communicator has one DeviceProxy: a thread that drives its device operations, the staging pool (capped by
// BAGUA_DEVICE_MEMORY_LIMIT) and the host-mapped words that gate user streams. Failure or abort completes every
// enqueued operation (its output undefined) and releases its stream.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/ipc_cache.h"
#include "core/operation.h"
#include "core/staging_window.h"
#include "kernels/device_runtime.h"

namespace bagua {

class Comm;
class DeviceProxy;

// A block of the staging pool, returned to it on destruction; or, with no block yet, room for one that the limit
// keeps for it (DeviceProxy::lease, DeviceProxy::fill).
class StagingLease {
 public:
  StagingLease() = default;
  StagingLease(DeviceProxy* pool, void* ptr, size_t bytes) : pool_(pool), ptr_(ptr), bytes_(bytes) {}
  StagingLease(StagingLease&& other) noexcept { *this = std::move(other); }
  StagingLease& operator=(StagingLease&& other) noexcept;
  ~StagingLease() { reset(); }
  void reset();
  unsigned char* data() const { return static_cast<unsigned char*>(ptr_); }
  size_t bytes() const { return bytes_; }

 private:
  friend class DeviceProxy;
  DeviceProxy* pool_ = nullptr;
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// CUDA's special stream handles: the legacy default stream (NULL or cudaStreamLegacy), one per device; the per-thread
// default stream, one per thread and device.
bool is_legacy(DeviceStream stream);
bool is_per_thread(DeviceStream stream);

// A user stream parked on a host-mapped word until release(); released on destruction at the latest.
class StreamGate {
 public:
  StreamGate() = default;
  StreamGate(DeviceProxy* owner, uint32_t slot, volatile uint32_t* word, uint32_t value)
      : owner_(owner), slot_(slot), word_(word), value_(value) {}
  StreamGate(StreamGate&& other) noexcept { *this = std::move(other); }
  StreamGate& operator=(StreamGate&& other) noexcept;
  ~StreamGate() { release(); }
  void release();

 private:
  DeviceProxy* owner_ = nullptr;
  uint32_t slot_ = 0;
  volatile uint32_t* word_ = nullptr;
  uint32_t value_ = 0;
};

struct DeviceCopy {
  void* dst;
  const void* src;
  size_t bytes;
};

// A stream in use by one device operation of one rank, registered process-wide so that thread ranks sharing a
// stream are refused (docs/cuda.md). Released on destruction.
class StreamClaim {
 public:
  StreamClaim() = default;
  StreamClaim(const StreamClaim&) = delete;
  StreamClaim& operator=(const StreamClaim&) = delete;
  ~StreamClaim();
  // Throws INVALID_USAGE when another rank of communicator comm_id in this process has work in flight on a stream
  // that would order this one behind it: the same stream, or the legacy default stream and a blocking stream of
  // the same device. claim = false only checks.
  void take(DeviceRuntime& runtime, uint64_t comm_id, int rank, DeviceStream stream, bool claim);

 private:
  long index_ = -1;
};

// A host-mapped word that a stream writes (DeviceRuntime::write_value) and the host polls: one of the proxy's gate
// slots with a fresh value.
struct StreamSignal {
  uint32_t slot = 0;
  volatile uint32_t* word = nullptr;
  uint32_t value = 0;
  bool reached() const;
};

// A request staged on its caller's stream whose host operation has ended: its output copies, the staging they read
// and its words, which the thread that tests or waits for the request takes over (DeviceProxy::complete_request).
struct PendingOutput {
  int device = -1;
  std::shared_ptr<StagingLease> staging;
  std::vector<DeviceCopy> copies;
  std::vector<StreamSignal> signals;
  StreamSignal output;
};

class DeviceOperation final : public Operation, private StagingWindow {
 public:
  DeviceOperation(bagua_opkind_t kind, DeviceProxy& proxy, DeviceStream stream, int device, StagingLease staging);
  ~DeviceOperation() override;

  unsigned char* staging() const { return shared_staging_ ? shared_staging_->data() : staging_.data(); }
  size_t staging_bytes() const { return shared_staging_ ? shared_staging_->bytes() : staging_.bytes(); }
  // Device memory for the work the operation issues (stream-ordered on the copy stream of its device, freed after
  // that work), its size counted under BAGUA_DEVICE_MEMORY_LIMIT as staging is. Taken at the call: throws SYSTEM
  // when out of memory or over the limit, TIMEOUT when the limit stays full.
  void take_device_scratch(size_t bytes);
  unsigned char* device_scratch() const { return static_cast<unsigned char*>(device_scratch_); }
  // What the operation holds under the limit: staging and device scratch.
  size_t held_bytes() const { return staging_bytes() + device_room_.bytes(); }
  // Whether its events changed since the last call (the proxy thread's: what a call waiting for staging counts).
  bool new_events_for_proxy() {
    const uint64_t now = events();
    const bool changed = now != events_seen_by_proxy_;
    events_seen_by_proxy_ = now;
    return changed;
  }
  void copy_in(void* stage, const void* device_src, size_t bytes) { copies_in_.push_back({stage, device_src, bytes}); }
  void copy_out(void* device_dst, const void* stage, size_t bytes) {
    copies_out_.push_back({device_dst, stage, bytes});
  }
  const std::vector<DeviceCopy>& copies_in() const { return copies_in_; }
  const std::vector<DeviceCopy>& copies_out() const { return copies_out_; }
  // Words for late spans (kernels/late_span.h) in the call's own staging, `at` bytes from its start (8-aligned):
  // a call that computes on the caller's stream writes them from the host before its phases reach the work.
  void set_late_words_at(size_t at) { late_words_at_ = at; }
  // Kept until the stream has written the call's output word (what its device work uses: peers' IPC mappings),
  // also when the call fails or its stream is released before then.
  void hold_until_output(std::shared_ptr<void> held) { held_until_output_.push_back(std::move(held)); }
  uint64_t* late_words() const { return reinterpret_cast<uint64_t*>(staging() + late_words_at_); }
  // The copies may run in pieces around a host operation that pipelines (core/staging_window.h), from
  // kPipelineMinBytes of input or output: the collectives' staged path allows it.
  void allow_pipelined_staging() { pipeline_allowed_ = true; }
  // The user's stream position this operation starts after, and the gate that holds the stream's later work
  // until it ends (none for a request, which is its own synchronisation point). Operations of one group on one
  // stream share the position (submit_device_group).
  void set_order(std::shared_ptr<DeviceEvent> input_ready, std::shared_ptr<StreamGate> gate);
  bool ordered() const { return ordered_; }
  // Staging on the caller's stream (docs/cuda.md, "What a parked stream blocks"): a gated call with staging laid out
  // at its start puts its copies on the caller's stream around the gate, and the stream writes host-mapped words
  // when its input (or each input piece) is staged and its output copied back, so that the proxy thread needs no
  // CUDA call for it. The submitter calls enqueue_input (staging taken now); then, outside a group,
  // enqueue_output_pieces (a pipelined call's output pieces, each behind a gate of its own that the proxy opens once
  // no step writes the piece); then parks the call's gate; then enqueue_output (the copies not enqueued yet, then
  // the output word). Such a call keeps no event (destroying one is a CUDA call) and never takes an idle block
  // when it starts.
  bool can_stage_on_caller_stream() const;
  // A request (it parks no stream) enqueues its input only; once its host operation has succeeded, the proxy hands
  // its output to the request's test or wait (take_pending_output).
  void enqueue_input_on_caller_stream();
  PendingOutput take_pending_output();
  void enqueue_output_pieces_on_caller_stream();
  void enqueue_output_on_caller_stream();
  bool on_caller_stream() const { return on_caller_stream_; }
  // Device work of the call's own on the caller's stream, in phases around its host operation (docs/cuda.md,
  // "Compression on the caller's stream"), enqueued at the call:
  //   [phase 0] [word 0] [gate 1] [phase 1] [word 1] ... [gate n-1: the call's] [phase n-1] [output word]
  // The host operation sends what phase k wrote once phase_done(k), and opens gate k (open_phase) once phase k may
  // read what the rounds received; the last phase runs once the operation has ended. Such a call takes its own
  // staging block (its builder writes it at the call) and hands it to no later call. At the call, before the
  // sequence number: stream_scratch_bytes of device memory ordered on the caller's stream (freed there after the
  // last phase), counted under BAGUA_DEVICE_MEMORY_LIMIT; throws SYSTEM when out of memory. timestamps_at: where in
  // the staging kTimestampBytes are kept for the phases' timestamps (BAGUA_DEVICE_TIMING=1), or kNoTimestamps.
  static constexpr size_t kMaxTimedPhases = 8, kTimestampBytes = 2 * kMaxTimedPhases * sizeof(uint64_t);
  static constexpr size_t kNoTimestamps = ~size_t{0};
  void compute_on_caller_stream(size_t stream_scratch_bytes, size_t timestamps_at = kNoTimestamps);
  bool computes_on_caller_stream() const { return computes_on_caller_stream_; }
  // A staged call of a group that could run on its caller's stream instead: builds that form, with the same sequence
  // number (the group's end takes it where every call of the group is on one communicator and has such a form;
  // docs/cuda.md). build takes the room under the memory limit that this call holds (take_room), leased at the call
  // for either form.
  using Alternative = std::function<std::unique_ptr<DeviceOperation>(StagingLease room)>;
  void set_caller_stream_alternative(Alternative build) { caller_stream_alternative_ = std::move(build); }
  bool has_caller_stream_alternative() const { return static_cast<bool>(caller_stream_alternative_); }
  Alternative take_caller_stream_alternative() { return std::move(caller_stream_alternative_); }
  // Before it is submitted: its room, for the form that replaces it.
  StagingLease take_room() { return std::move(staging_); }
  unsigned char* stream_scratch() const { return static_cast<unsigned char*>(stream_scratch_); }
  // Set by the lay-out (lay_out_staging_at_start), which runs on the calling thread once the staging is taken.
  void set_phases(std::vector<std::function<void(DeviceStream)>> phases) { phases_ = std::move(phases); }
  bool phase_done(size_t k) const { return phase_words_[k].reached(); }
  void open_phase(size_t k);
  // Whether the proxy thread makes CUDA calls for it (not when staged on the caller's stream).
  bool makes_device_calls() const { return !on_caller_stream_; }
  // Submitted: counted as waiting to start (DeviceProxy::lease leaves idle blocks to such operations) until its input
  // is ready and it has taken its staging, or it ends.
  void wait_to_start();
  // The host operation on the staging memory, built once the input is there; the sequence number is already taken.
  void set_host_operation(std::function<std::unique_ptr<Operation>()> build, std::string description);

  // Staging is leased at the call as room under the limit (in call order) and allocated, or taken from the pool's
  // idle blocks, when the operation starts: lay_out then registers the copies and staged buffers on staging(). So
  // calls queued on a stream share a few blocks instead of each allocating its own.
  void lay_out_staging_at_start(std::function<void(DeviceOperation&)> lay_out) { lay_out_ = std::move(lay_out); }
  // An in-host device algorithm (algorithms/peer_memory) decides at run time whether to stage: the operation is
  // made with a lease that holds only room (granted at the call, in call order, like any call's staging), the host
  // operation is built as soon as the input is ready, and the staging is allocated, laid out (lay_out registers the
  // copies and staged buffers on staging()) and copied only when it asks.
  void defer_staging(std::function<void(DeviceOperation&)> lay_out);
  // For that host operation: allocate (the room is kept: no wait) and lay out the staging. Then
  // copy the input in (staged_in() tells when it is there) and the output back at the end. (Every other operation
  // takes its staging this way when it starts.)
  void take_staging();
  // It will not stage: the room goes back to other calls now.
  void release_staging();
  void set_staged_buffers(const void* send, void* recv) {
    staged_send_ = send;
    staged_recv_ = recv;
  }
  const void* staged_send() const { return staged_send_; }
  void* staged_recv() const { return staged_recv_; }
  void stage_in() {
    issue([this](DeviceStream s) { copy_all(copies_in_, s); });
  }
  bool staged_in() { return work_done(); }
  void stage_out_at_end() { copy_out_wanted_ = true; }
  // Device work of that host operation (reductions, copies into peers' buffers) on the library's stream of this
  // device; work_done() once it has finished, and the operation ends only after.
  void issue_work(const std::function<void(DeviceStream)>& launch) { issue(launch); }
  bool work_done() { return copies_done_ == nullptr || copies_done_->done(); }  // throws when the work failed
  IpcCache& ipc_cache();

  void advance(Transport& transport) override;
  bool on_device() const override { return true; }
  // Waiting for the caller's earlier stream work is not a stall of this operation.
  // Nor is the host operation's wait for its turn behind an earlier call (whose own wait for its input may be long).
  bool watched() const override {
    return phase_ != Phase::kWaitInput && (phase_ != Phase::kRun || !host_op_ || host_op_->watched());
  }
  std::string waiting_for() const override;
  // No copy of this operation is in flight (its staging memory is free to reuse).
  bool quiescent();
  DeviceStream stream() const { return stream_; }
  int device() const { return device_; }
  DeviceProxy& proxy() const { return proxy_; }
  StreamClaim& claim() { return claim_; }

 private:
  uint64_t events_seen_by_proxy_ = 0;
  enum class Phase { kWaitInput, kCopyIn, kRun, kCopyOut, kDone };
  // One piece of a staging copy, and the event recorded after it on the copy stream; or, staged on the caller's
  // stream, the word the stream writes after an input piece, and the gate an output piece waits behind.
  struct Piece {
    DeviceCopy copy;
    std::unique_ptr<DeviceEvent> done;
    StreamSignal signal;
    std::shared_ptr<StreamGate> gate;
    bool issued = false, arrived = false;
    bool copied() const { return done ? done->done() : signal.reached(); }  // throws when the copy failed
  };
  // Whether the copies go in pieces (from kPipelineMinBytes, where the call allows it), and the split.
  bool pipelines_copies() const;
  void split_into_pieces();
  // Pipelined staging on the proxy's copy stream: splits the copies into pieces and issues the input's.
  void start_pipeline();
  void note_started();
  // Issues the copies of the pieces in [first, last) not issued yet (with events: an event after each).
  void issue_pieces(std::vector<Piece>& pieces, size_t first, size_t last, bool events);
  // StagingWindow, for the host operation.
  bool arrived(const std::vector<Range>& ranges) override;
  bool arrived_all() override;
  const std::vector<Range>& output_pieces() const override { return output_ranges_; }
  void output_final(size_t piece, bool early) override;
  // Runs launch on the copy stream and records the event quiescent() waits for.
  void issue(const std::function<void(DeviceStream)>& launch);
  // Throws TIMEOUT once the monitor has released the streams: no new device work then.
  void refuse_if_released() const;
  // Enqueues the copies on the caller's stream (then the signal's write).
  void enqueue_copies(const std::vector<DeviceCopy>& copies);
  void enqueue_copies_then_signal(const std::vector<DeviceCopy>& copies, const StreamSignal& signal);
  // compute_on_caller_stream's phases up to the call's gate, and the last one.
  void enqueue_phases_before_gate();
  void enqueue_last_phase();
  void copy_all(const std::vector<DeviceCopy>& copies, DeviceStream stream);

  DeviceProxy& proxy_;
  DeviceStream stream_;
  int device_;
  StagingLease staging_;
  // Staged on the caller's stream, once its gate is parked: the block, which a later call on the stream may share.
  std::shared_ptr<StagingLease> shared_staging_;
  StagingLease device_room_;  // room under the limit for device_scratch_ (no pinned block)
  void* device_scratch_ = nullptr;
  StreamClaim claim_;
  std::shared_ptr<StreamGate> gate_;
  std::shared_ptr<DeviceEvent> input_ready_;
  std::unique_ptr<DeviceEvent> copies_done_;
  bool copies_unknown_ = false;  // a copy was issued but its completion could not be recorded
  std::vector<DeviceCopy> copies_in_, copies_out_;
  std::function<std::unique_ptr<Operation>()> build_;
  std::unique_ptr<Operation> host_op_;
  Phase phase_ = Phase::kWaitInput;
  bool deferred_ = false;
  bool copy_out_wanted_ = false;
  std::function<void(DeviceOperation&)> lay_out_;
  const void* staged_send_ = nullptr;
  void* staged_recv_ = nullptr;
  uint64_t host_events_ = 0, host_bytes_ = 0;
  bool pipeline_allowed_ = false, pipelined_ = false;
  bool waits_to_start_ = false;
  bool ordered_ = false;
  bool on_caller_stream_ = false;
  // Staged on the caller's stream: the words the stream writes once it reached the call, once all input is staged
  // (the same word when the input is one piece), and once the output is copied back; every word the call took.
  // All are taken before anything is enqueued.
  StreamSignal first_input_signal_, input_signal_, output_signal_;
  std::vector<StreamSignal> signals_;
  bool input_signalled_ = false, output_signalled_ = false;  // their writes are enqueued
  bool enqueue_broken_ = false;  // a copy may be enqueued whose signal is not: the staging is never reused
  std::vector<Piece> in_pieces_, out_pieces_;
  // compute_on_caller_stream: the phases, the words after each but the last, the gates before each but the first
  // (gate k at [k]; the last is the call's gate_), and the scratch ordered on the caller's stream.
  bool computes_on_caller_stream_ = false;
  Alternative caller_stream_alternative_;
  std::vector<std::function<void(DeviceStream)>> phases_;
  std::vector<StreamSignal> phase_words_;
  std::vector<std::shared_ptr<StreamGate>> phase_gates_;
  void* stream_scratch_ = nullptr;
  bool stream_scratch_freed_ = false;  // its free is enqueued after the last phase
  size_t timestamps_at_ = kNoTimestamps;
  size_t late_words_at_ = 0;
  std::vector<std::shared_ptr<void>> held_until_output_;
  size_t timed_phases_ = 0;  // phases whose timestamps are enqueued (all of them, once the last one is)
  uint64_t* timestamps() const { return reinterpret_cast<uint64_t*>(staging() + timestamps_at_); }
  // The GPU time between each phase's two timestamps, in nanoseconds (once the output word is written).
  static uint64_t phases_ns(const uint64_t* timestamps, size_t phases);
  // Adds the phases' time to comm's compute_ns when freed (the drain frees it once the output word is written).
  struct PhaseTimes {
    std::shared_ptr<StagingLease> block;  // holding the timestamps
    std::shared_ptr<void> held;           // what else the drain keeps
    const uint64_t* stamps = nullptr;
    size_t phases = 0;
    Comm* comm = nullptr;
    ~PhaseTimes();
  };
  std::vector<Range> output_ranges_;
  size_t early_pieces_ = 0;  // output pieces copied out while the host operation still had steps to run
  size_t arrived_pieces_ = 0;
  size_t overlapped_steps_ = 0;  // steps that started while input pieces were still on their way
};

// What a non-blocking device call's request waits for: the device operation's end (its copies included). A request
// staged on its caller's stream has its output copied back by the thread that tests or waits for it, once the host
// operation has ended (DeviceProxy::complete_request), so that the proxy thread makes no CUDA call for it.
struct DeviceCompletion {
  std::atomic<bool> done{false};
  bagua_status_t status = BAGUA_SUCCESS;
  std::string error;                      // written before done is set
  std::atomic<bool> output_waits{false};  // the host operation succeeded: its output waits for complete_request
  // The tester's: the copy stream writes this word after the output copies, which were enqueued before the deadline.
  bool output_enqueued = false;
  StreamSignal output;
  std::chrono::steady_clock::time_point deadline;
};

class DeviceProxy {
 public:
  explicit DeviceProxy(Comm& comm);
  // Waits up to the timeout for operations in flight, aborts the communicator if some remain, then stops.
  ~DeviceProxy();

  Comm& comm() const { return comm_; }
  DeviceRuntime& runtime() const { return runtime_; }

  // Refuses a stream that is being captured, or that another rank of this communicator in this process has work
  // on (thread ranks need a stream each). Otherwise its only effect: the device path's kernels loaded into the
  // stream's device, once.
  void check_stream(DeviceStream stream) const;
  // Room for `bytes` of staging under BAGUA_DEVICE_MEMORY_LIMIT, kept for the lease until fill() gives it a block
  // when its operation starts (so leases are granted in call order, and calls queued on a stream share the pool's
  // idle blocks). Where there is no room, it waits for operations in flight to start or hand theirs back, until
  // staging_progress_ has stood still for the timeout (a long operation ahead that progresses does not fail the
  // call), or the communicator fails (its error); an idle block that fits (at
  // most twice the size) becomes the lease's once no submitted operation waits to start, or 2 s after it first saw it
  // (reuse_idle = false: never; room for memory that is not pinned staging).
  StagingLease lease(size_t bytes, bool reuse_idle = true);
  // Gives a lease that holds only room a block (never waits: the room is kept): an idle one of up to twice the size,
  // else a new one. For submitted operations only (the block's size counts as theirs). Throws when out of memory.
  void fill(StagingLease& lease);
  // Throws when `bytes` of staging exceed BAGUA_DEVICE_MEMORY_LIMIT; else the size a lease of it takes.
  size_t check_staging_limit(size_t bytes) const;
  // Staging memory allocated now, free or leased, and held by submitted operations (for tests).
  size_t pool_bytes() {
    std::lock_guard<std::mutex> lock(mutex_);
    return pool_bytes_;
  }
  size_t submitted_bytes() {
    std::lock_guard<std::mutex> lock(mutex_);
    return submitted_bytes_;
  }
  // A submitted operation handed its staging (or its room) back before it ended.
  void uncount_submitted_staging(size_t bytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    submitted_bytes_ -= bytes;
    changed_.notify_all();
  }
  // Parks the stream's later work on a fresh gate.
  std::shared_ptr<StreamGate> park(DeviceStream stream);
  // A fresh signal word; given back once its stream has written it (never if it never does).
  StreamSignal take_signal();
  void give_back_signal(const StreamSignal& signal);
  // The staging and signals of an operation staged on its caller's stream that ended before its stream wrote `until`
  // (its output word, or its last input word when no output was enqueued): the proxy thread hands them back once the
  // stream has, without a CUDA call; kept forever if `broken`, or if the stream has not within the timeout when the
  // proxy is destroyed.
  // `completion`, where given, is a request's, completed once `until` is written (or, past the timeout when the
  // proxy is destroyed, with an error).
  // keep_alive is released with the staging.
  void drain_later(std::shared_ptr<StagingLease> staging, std::vector<StreamSignal> signals, StreamSignal until,
                   bool broken, std::shared_ptr<DeviceCompletion> completion = nullptr,
                   std::shared_ptr<void> keep_alive = nullptr);
  // Staging blocks passed along a stream (docs/cuda.md): the block of the last call staged on `stream` whose gate is
  // parked, and its copies and output word enqueued. A later call on that stream may take it (once: taking forgets
  // it) where it holds `bytes`, since the stream runs that call's copies only after the gate, which opens once the
  // earlier call has ended; the block goes back to the pool when its last holder has drained.
  void pass_block_along(DeviceStream stream, const std::shared_ptr<StagingLease>& block);
  std::shared_ptr<StagingLease> block_passed_along(DeviceStream stream, size_t bytes);
  // The proxy thread is alive and not inside a call (monitor).
  void heartbeat();
  // Hands back what finished calls still hold and counts their device time (BAGUA_DEVICE_TIMING): the stats then
  // include every call whose stream has passed its end. Any thread.
  void settle() { drain(false); }
  bool on_proxy_thread() const { return std::this_thread::get_id() == proxy_thread_id_.load(); }
  // The monitor released the parked streams (the communicator fails).
  bool streams_released() const { return forced_open_after_ms_.load() != 0; }
  // The library's copy stream on `device`.
  DeviceStream copy_stream(int device);
  // Peers' allocations mapped through IPC (used by the proxy thread only; opened() may be read from any).
  IpcCache& ipc_cache() { return *ipc_cache_; }
  // The IPC path on the caller's stream: mappings the calling threads open (core/ipc_cache.h). Every device call's
  // thread calls open_requested_mappings before it enqueues (it also closes what was let go while no gate is parked).
  CallerIpcMappings& caller_mappings() { return *caller_mappings_; }
  void open_requested_mappings();
  // Submitted operations that wait to start (+1), or started or ended (-1).
  void count_unstarted(int change) {
    std::lock_guard<std::mutex> lock(mutex_);
    unstarted_ += change;
    changed_.notify_all();
  }
  // How the ranks ran the device calls of in-host algorithms on peers' memory (algorithms/peer_memory) so far:
  // through IPC, or staged (for tests and tools).
  void count_in_host_call(bool through_ipc) { (through_ipc ? in_host_through_ipc_ : in_host_staged_)++; }
  uint64_t in_host_through_ipc() const { return in_host_through_ipc_.load(); }
  uint64_t in_host_staged() const { return in_host_staged_.load(); }
  // Quantized allreduces that compressed on the device (the others of device memory were staged).
  void count_compressed_on_device() { compressed_on_device_++; }
  uint64_t compressed_on_device() const { return compressed_on_device_.load(); }
  // Staged calls whose copies ran in pieces around the host operation, their output pieces copied out while steps
  // were still to run, and their steps that started while input pieces were still on their way.
  void count_pipelined(size_t early_pieces, size_t overlapped_steps) {
    pipelined_calls_++;
    early_output_pieces_ += early_pieces;
    overlapped_steps_ += overlapped_steps;
  }
  uint64_t pipelined_calls() const { return pipelined_calls_.load(); }
  uint64_t early_output_pieces() const { return early_output_pieces_.load(); }
  uint64_t overlapped_steps() const { return overlapped_steps_.load(); }
  // Gate pages that a communicator of the process took over from a destroyed one (counted for the tests).
  static uint64_t gate_pages_taken_over();
  bool pipelined_staging() const;  // BAGUA_PIPELINED_STAGING
  // For a request's test or wait (any thread but the proxy's): whether it has completed. A request staged on its
  // caller's stream that waits for its output has it copied back here, on the proxy's copy stream of its device
  // (CUDA calls of the waiting thread); it completes once those copies have run, or with BAGUA_ERR_CUDA when they
  // have not within the timeout.
  bool complete_request(DeviceCompletion& completion);
  // Orders the operation on its stream (input event and gate, or for a request the input event only), starts it
  // and hands it to the proxy thread; `completion`, when given, learns its end. The sequence number is already
  // taken, so a failure here fails the communicator.
  void submit(std::unique_ptr<DeviceOperation> op, std::shared_ptr<DeviceCompletion> completion = nullptr);

 private:
  // The idle block a lease of `bytes` takes (best fit, at most twice the size), or free_blocks_.end(). Under mutex_.
  std::multimap<size_t, void*>::iterator fitting_idle_block(size_t bytes);
  friend class StagingLease;
  friend class StreamGate;
  struct Entry {
    std::unique_ptr<DeviceOperation> op;
    std::shared_ptr<DeviceCompletion> completion;
    bool holds_staging = false;  // at submission (its staging is the engine's to read after)
  };
  void run();
  // Whether a stream of any communicator of the process is parked on a gate (freeing pinned memory then waits).
  static bool gates_parked_anywhere();
  // Frees idle pinned blocks (size -> block) and those that earlier calls kept, or keeps them all while a gate is
  // parked anywhere: a new block then takes one that fits (take_unfreed_block: block and size, or nullptr).
  void retire_pinned(std::multimap<size_t, void*> blocks) noexcept;
  static std::pair<void*, size_t> take_unfreed_block(size_t bytes);
  void finish(Entry& entry, bagua_status_t status, std::string error);
  void give_back(void* ptr, size_t bytes);
  // Opens the gate (stores value into word) before it takes any lock that a runtime call may hold: a thread
  // waiting inside the driver for the gated stream must never keep the gate shut.
  void release_slot(uint32_t slot, volatile uint32_t* word, uint32_t value);
  // IPC mappings the cache let go are closed only while no stream of the process is parked on a gate (closing may
  // wait for the device, as freeing pinned memory does).
  void close_later(void* mapped, int device);
  void close_pending(bool force);

  // The monitor, a thread that makes no runtime call (docs/cuda.md, "What a parked stream blocks"): when the proxy
  // thread's heartbeat (each round, operation and wait) is older than BAGUA_TIMEOUT plus kMonitorMarginMs while
  // streams are parked on this proxy's gates, one call of that thread has not returned (a user thread waiting inside
  // the driver for one of those streams can do that): the monitor opens the gates, and the proxy thread, once back,
  // fails the communicator and issues no more device work.
  void monitor();
  // Hands back what drain_later kept where its word has been written (final: keeps forever what is past its
  // deadline).
  void drain(bool final);
  struct Draining {
    std::shared_ptr<StagingLease> staging;
    std::vector<StreamSignal> signals;
    StreamSignal until;
    std::shared_ptr<DeviceCompletion> completion;
    std::chrono::steady_clock::time_point deadline;
    std::shared_ptr<void> keep_alive;
  };
  // Once the monitor has opened gates: fails the communicator (the first time) and turns a success of the operation
  // just tested into that error. Proxy thread.
  void report_forced_open(bagua_status_t* status, std::string* error);
  struct ParkedGate {
    uint32_t slot;
    volatile uint32_t* word;
    uint32_t value;
  };

  Comm& comm_;
  DeviceRuntime& runtime_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<Entry> entries_;
  // Grows while the operations that hold staging progress: the proxy thread counts a pass in which one holding
  // staging had new events (a step, a phase), and give_back() every block or room handed back. Only grows.
  std::atomic<uint64_t> staging_progress_{0};
  bool stopping_ = false;
  // Staging pool. Blocks are freed only while no operation of this communicator holds one: freeing pinned
  // memory waits for the device, including streams parked on our gates.
  std::multimap<size_t, void*> free_blocks_;
  size_t pool_bytes_ = 0;       // allocated (free or leased) or being allocated
  size_t leased_bytes_ = 0;     // held by operations, submitted or not (blocks and kept room)
  size_t kept_bytes_ = 0;       // room under the limit kept for leases not filled yet
  long unstarted_ = 0;          // submitted operations whose input is not ready yet
  size_t submitted_bytes_ = 0;  // held by submitted operations, which give them back
  // Gate words: pages of host-mapped memory, a generation per slot.
  std::vector<uint32_t*> gate_pages_;
  std::vector<uint32_t> gate_generation_;
  std::vector<uint32_t> free_slots_;
  std::map<int, DeviceStream> copy_streams_;
  std::unique_ptr<IpcCache> ipc_cache_;
  std::unique_ptr<CallerIpcMappings> caller_mappings_;
  std::mutex closes_mutex_;
  std::vector<std::pair<void*, int>> pending_closes_;
  std::atomic<uint64_t> in_host_through_ipc_{0}, in_host_staged_{0}, compressed_on_device_{0};
  std::atomic<uint64_t> pipelined_calls_{0}, early_output_pieces_{0}, overlapped_steps_{0};
  std::mutex parked_mutex_;  // never held across a runtime call
  std::condition_variable monitor_wake_;
  std::vector<ParkedGate> parked_;  // gates parked and not yet released
  bool monitor_stopping_ = false;
  std::atomic<int64_t> heartbeat_ns_;  // the proxy thread's last round of its loop (steady clock)
  std::atomic<std::thread::id> proxy_thread_id_;
  std::atomic<int64_t> forced_open_after_ms_{0};  // set by the monitor: how long the proxy thread had been stuck
  bool forced_open_reported_ = false;             // proxy thread
  std::mutex draining_mutex_;
  std::vector<Draining> draining_;
  std::atomic<size_t> draining_bytes_{0};
  std::atomic<bool> signals_kept_{false};  // a stream may still write a gate page: never free the pages
  struct RequestOutput {
    std::shared_ptr<DeviceCompletion> completion;
    PendingOutput output;
  };
  std::mutex requests_mutex_;  // never held across a runtime call
  std::vector<RequestOutput> request_outputs_;
  std::mutex passed_mutex_;
  std::map<std::pair<DeviceStream, int>, std::weak_ptr<StagingLease>> passed_blocks_;  // by stream and device
  std::optional<std::pair<DeviceStream, int>> passing_key(DeviceStream stream) const;
  std::thread thread_;
  std::thread monitor_;
};

// The device calls of one bagua_group_start/end, possibly of several communicators: on each stream, one input
// position for all of them, then each communicator's gate, so that none waits on another's. Then each is submitted.
// Throws the first error after failing the communicators concerned.
void submit_device_group(std::vector<std::unique_ptr<DeviceOperation>> ops);

}  // namespace bagua

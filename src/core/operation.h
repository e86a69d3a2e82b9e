// An operation in flight: a state machine over transfers that the communicator's progress engine advances.
// Every blocking call is post + wait on one of these; non-blocking calls hand it out as a request.
#pragma once

#include <atomic>
#include <string>
#include <vector>

#include "bagua/bagua.h"
#include "transport/transport.h"

namespace bagua {

class Operation {
 public:
  enum class State { kRunning, kDone, kFailed };

  Operation(bagua_opkind_t kind, std::string description) : kind_(kind), description_(std::move(description)) {}
  virtual ~Operation() = default;
  Operation(const Operation&) = delete;
  Operation& operator=(const Operation&) = delete;

  // Posts and completes as much as it can without blocking; calls finish() at the end.
  // Throws Error when a transfer fails.
  virtual void advance(Transport& transport) = 0;

  // Counts it under another kind in the stats (a quantized allreduce that ran as a plain allreduce).
  void count_as(bagua_opkind_t kind) { kind_ = kind; }
  State state() const { return state_; }
  bool running() const { return state_ == State::kRunning; }
  bagua_opkind_t kind() const { return kind_; }
  const std::string& description() const { return description_; }
  bagua_status_t status() const { return status_; }
  const std::string& error() const { return error_; }
  uint64_t events() const { return events_.load(std::memory_order_relaxed); }
  uint64_t bytes_sent() const { return bytes_sent_; }
  // Its entry in the communicator's flight recorder (core/flight_recorder.h).
  uint64_t trace_id() const { return trace_id_; }
  void set_trace_id(uint64_t id) { trace_id_ = id; }
  // The collective and the algorithm the dispatcher chose ("allreduce", "ring"; static strings, so no copy on the
  // per-call path), for the flight recorder's counts; nullptr for point to point.
  const char* collective_name() const { return collective_name_; }
  const char* algorithm_name() const { return algorithm_name_; }
  void set_algorithm(const char* collective, const char* algorithm) {
    collective_name_ = collective;
    algorithm_name_ = algorithm;
  }
  // The collective sequence number it runs under (core/tags.h); -1 for point to point and internal operations.
  int64_t collective_sequence() const { return collective_sequence_; }
  void set_collective_sequence(uint64_t sequence) { collective_sequence_ = static_cast<int64_t>(sequence); }
  // Which transfers are still pending, for timeout messages ("receive of 4096 bytes from rank 3").
  virtual std::string waiting_for() const;
  // For a timeout message: messages that arrived from the peers it waits on but matched none of its receives
  // ("rank 1 sent broadcast of float32 (collective #3 mod 4096)"); empty when there are none.
  std::string unmatched_messages(Transport& transport) const;
  // A message that arrived under this operation's sequence number from a peer it waits on, but carries another
  // call's fingerprint, so no receive of it will ever match: the mismatch named (describe_call_mismatch), or "".
  std::string mismatched_message(Transport& transport) const;
  // Stream-ordered on device memory (core/device_proxy.h): the call hands it to the communicator's proxy.
  virtual bool on_device() const { return false; }
  // It follows core/staging_window.h when it runs on a device call's staging: its steps wait for the input pieces
  // they touch, and it reports output pieces as they become final.
  virtual bool pipelines_staging() const { return false; }
  // Whether the watchdog times it out when it makes no progress (not while it waits for the caller's stream).
  virtual bool watched() const { return true; }

  void fail(bagua_status_t status, const std::string& message);

 protected:
  void finish() { state_ = State::kDone; }
  // Progress made outside poll(), for the watchdog.
  void note_progress() { count_event(); }
  void set_description(std::string description) { description_ = std::move(description); }
  // Checks a transfer; true once it is done. Counts the completion as progress; throws when it failed.
  bool poll(Transport& transport, Transfer& transfer);
  void post_send(Transport& transport, Transfer& transfer, int peer, uint64_t tag, const void* data, size_t bytes,
                 SendMode mode = SendMode::kDefault);
  // unmatched_bits: the call fingerprint's bits (core/tags.h), compared on arrival; 0 matches the tag exactly.
  void post_recv(Transport& transport, Transfer& transfer, int peer, uint64_t tag, void* data, size_t bytes,
                 uint64_t unmatched_bits = 0);
  // Bytes sent outside post_send (cross-memory writes).
  void add_bytes_sent(uint64_t bytes) { bytes_sent_ += bytes; }

 private:
  void count_event() { events_.store(events_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed); }

  bagua_opkind_t kind_;
  std::string description_;
  State state_ = State::kRunning;
  bagua_status_t status_ = BAGUA_SUCCESS;
  std::string error_;
  // Written under the engine's lock; read without it by a caller waiting for the operation (back-off only).
  std::atomic<uint64_t> events_{0};
  uint64_t bytes_sent_ = 0;
  uint64_t trace_id_ = 0;
  int64_t collective_sequence_ = -1;
  const char* collective_name_ = nullptr;
  const char* algorithm_name_ = nullptr;
  std::vector<const Transfer*> watched_;
};

}  // namespace bagua

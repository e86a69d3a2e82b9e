// Transport interface: tagged, non-blocking point-to-point messages between the ranks of one communicator.
// Algorithms post Transfers and poll them; the transport never blocks and never calls back into them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "bagua/bagua.h"
#include "base/bytes.h"

namespace bagua {

// Where a transport lists a transfer among those in flight (SIZE_MAX: not listed). It belongs to the object's
// address: a copy is never listed, and assigning to a transfer keeps the destination's own.
struct TransferListSlot {
  size_t value = SIZE_MAX;
  TransferListSlot() = default;
  TransferListSlot(const TransferListSlot&) noexcept {}
  TransferListSlot& operator=(const TransferListSlot&) noexcept { return *this; }
};

// One posted send or receive. Owned by the operation that posted it; must outlive its completion or
// its cancellation by Transport::shutdown.
struct Transfer {
  enum class State { kIdle, kPending, kDone, kFailed };
  State state = State::kIdle;
  bool is_send = false;
  int peer = -1;
  uint64_t tag = 0;
  uint64_t unmatched_bits = 0;  // receive: tag bits matching ignores and compares on arrival (the call's fingerprint)
  uint64_t sender_tag = 0;      // receive: the arriving message's tag
  bool tag_mismatch = false;    // receive failed because sender_tag differs from tag in unmatched_bits
  size_t bytes = 0;
  void* handle = nullptr;  // transport-specific request
  void* aux = nullptr;     // a second request (single-copy protocol: the acknowledgement)
  void* user_data = nullptr;
  int stage = 0;                           // single-copy protocol progress; 0 for a plain message
  uint8_t control[48] = {};                // single-copy header (32 bytes) and acknowledgement (8)
  bagua_status_t failure = BAGUA_SUCCESS;  // when kFailed: REMOTE, INVALID_USAGE (size mismatch) or ABORTED
  std::string error;                       // when kFailed: why
  TransferListSlot pending_slot;           // the transport's bookkeeping (its list of transfers in flight)

  Transfer() = default;
  Transfer(const Transfer&) = default;
  Transfer(Transfer&&) = default;
  Transfer& operator=(const Transfer&) = default;
  Transfer& operator=(Transfer&&) = default;
  // Still listed by a transport: it would later read and write the freed transfer. Never expected; reported, then
  // the process aborts rather than corrupting memory.
  ~Transfer() {
    if (pending_slot.value != SIZE_MAX) transfer_destroyed_in_flight(*this);
  }

 private:
  [[noreturn]] static void transfer_destroyed_in_flight(const Transfer& transfer);
};

struct TransportCounters {
  uint64_t bytes_sent = 0;
  uint64_t bytes_received = 0;
  uint64_t messages_sent = 0;
  uint64_t messages_received = 0;
};

// How a send may travel. Between ranks of one host, messages from the transport's single-copy threshold
// (BAGUA_SINGLE_COPY_MIN) up are read from the sender's memory by the receiver (single copy), which then
// acknowledges them.
// - kDefault: single copy from the threshold; below it the transport chooses (UCX: rendezvous above 8 KiB).
// - kEager: the message belongs to a pipeline that waits on each piece: sent without a handshake up to
//   kEagerMostBytes (a handshake is a round trip through the link's queue and the peer's progress), and by single
//   copy only from kEagerSingleCopyMin, since a single-copy send completes only once the receiver has read it.
// - kEagerOrSingleCopy: single copy from the threshold, eagerly below it; never UCX's rendezvous handshake.
enum class SendMode { kDefault, kEager, kEagerOrSingleCopy };
constexpr size_t kEagerMostBytes = 2 << 20;
constexpr size_t kEagerSingleCopyMin = 64 << 10;

class Transport {
 public:
  virtual ~Transport() = default;

  // This rank's address blob, exchanged with the others over the bootstrap.
  virtual Bytes local_address() = 0;
  // Creates endpoints to every rank (addresses indexed by rank, including this one).
  virtual void connect(const std::vector<Bytes>& addresses) = 0;

  virtual void post_send(Transfer& transfer, int peer, uint64_t tag, const void* data, size_t bytes,
                         SendMode mode = SendMode::kDefault) = 0;
  // unmatched_bits: tag bits the receive does not match on; a message whose bits there differ from tag's fails it
  // with INVALID_USAGE and tag_mismatch set (the data may have landed in `data`).
  virtual void post_recv(Transfer& transfer, int peer, uint64_t tag, void* data, size_t bytes,
                         uint64_t unmatched_bits = 0) = 0;
  // Updates transfer.state; a receive of the wrong length fails with an explanation.
  virtual void check(Transfer& transfer) = 0;
  // The tag of the oldest arrived message that no receive has matched yet, among those whose tag equals `tag` in
  // the bits of `mask`; false when there is none.
  virtual bool find_unmatched(uint64_t tag, uint64_t mask, uint64_t* sender_tag) = 0;
  // Drives communication; returns how much happened (0 when idle).
  virtual unsigned progress() = 0;
  // Whether its library calls may come from several threads (UCX: a worker in UCS_THREAD_MODE_MULTI); the
  // idle-progress thread (core/idle_progress.h) progresses only such transports.
  virtual bool thread_safe() const { return false; }
  // Whether a completed send may leave bytes, or a protocol reply, queued until a later progress() writes them out:
  // true where an endpoint runs over a network transport (TCP, InfiniBand), between ranks of one host as well.
  // Asked once, after the connections are warmed up (UCX may change an endpoint's transports until then).
  virtual bool sends_may_linger() const { return false; }

  // Faults in, ahead of use, the shared memory that the transport will soon touch for the first time (a fault costs
  // microseconds inside an operation). Called once, after the connections are warmed up; returns the bytes.
  virtual size_t prefault_shared_memory() noexcept { return 0; }

  // Cancels every pending transfer (they end kFailed), closes endpoints and frees the transport's resources.
  // graceful: flush first (bounded by a short timeout). Idempotent; nothing writes into user memory after.
  virtual void shutdown(bool graceful) = 0;

  virtual const TransportCounters& counters() const = 0;
  // Bytes an algorithm moved to or from peers by itself (cross-memory attach), for the counters.
  virtual void count_direct_traffic(uint64_t sent, uint64_t received) = 0;

  // Single-copy transfers between ranks of one host (Linux cross-memory attach). probe_blob() is
  // exchanged among all ranks; probe() tries to read each same-host peer's probe word and says whether
  // all could be read; enable_single_copy() turns it on for those peers once every rank agreed.
  virtual Bytes single_copy_probe_blob() { return {}; }
  virtual bool single_copy_probe(const std::vector<Bytes>&, const std::vector<bool>&) { return false; }
  virtual void enable_single_copy(const std::vector<bool>&) {}
  // Which transports serve which peers, for logs and docs.
  virtual std::string describe() const = 0;
};

}  // namespace bagua

// Transport over UCX ucp: one context and worker per communicator, one endpoint per rank, tag matching.
// Error handling keeps shared memory (peer mode with MM_ERROR_HANDLING) and a keepalive of timeout/3.
#pragma once

#include <unistd.h>

#include <ucp/api/ucp.h>

#include <sys/types.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <vector>

#include "transport/shared_mappings.h"
#include "transport/transport.h"

namespace bagua {

// What UcxTransport::prefault_shared_memory faults in of a shared mapping: the last kUcxPrefaultBytes (about 60 of
// UCX's 8 KiB receive buffers beyond the ~130 the warm-up uses), or all of a smaller one (a FIFO), of SysV and UCX
// POSIX mappings not in `before` (what was mapped before UCX started). False for any other mapping.
constexpr uintptr_t kUcxPrefaultBytes = uintptr_t{3} << 19;
bool ucx_prefault_range(const SharedMapping& mapping, const std::vector<SharedMapping>& before, uintptr_t* from);

// The transfers in flight, for shutdown to cancel: a vector indexed through Transfer::pending_slot, so that adding and
// removing allocate nothing (an unordered_set took a node per transfer, two allocations per message).
class PendingTransfers {
 public:
  bool contains(const Transfer* t) const {
    return t->pending_slot.value < list_.size() && list_[t->pending_slot.value] == t;
  }
  void insert(Transfer* t) {
    if (contains(t)) return;
    list_.push_back(t);  // first: when it throws, t is not listed
    t->pending_slot.value = list_.size() - 1;
  }
  void erase(Transfer* t) {
    if (!contains(t)) return;
    Transfer* last = list_.back();
    list_[t->pending_slot.value] = last;
    last->pending_slot.value = t->pending_slot.value;
    list_.pop_back();
    t->pending_slot.value = SIZE_MAX;
  }
  bool empty() const { return list_.empty(); }
  void clear() {
    for (Transfer* t : list_) t->pending_slot.value = SIZE_MAX;
    list_.clear();
  }
  std::vector<Transfer*> snapshot() const { return list_; }

 private:
  std::vector<Transfer*> list_;
};

class UcxTransport : public Transport {
 public:
  // single_copy_bytes: messages at least this large between ranks of one host are read directly from the
  // sender's memory (once enable_single_copy is called), kEager ones only from kEagerSingleCopyMin. Must be the
  // same on every rank. host_peers_in_other_pid_namespaces: leave out UCX's sysv transport, which does not connect
  // them (docs/transport.md, "PID namespaces"), unless UCX_TLS is set.
  UcxTransport(int rank, int nranks, int timeout_ms, size_t single_copy_bytes,
               bool host_peers_in_other_pid_namespaces = false);
  ~UcxTransport() override;

  Bytes local_address() override;
  void connect(const std::vector<Bytes>& addresses) override;
  void post_send(Transfer& transfer, int peer, uint64_t tag, const void* data, size_t bytes,
                 SendMode mode = SendMode::kDefault) override;
  void post_recv(Transfer& transfer, int peer, uint64_t tag, void* data, size_t bytes,
                 uint64_t unmatched_bits = 0) override;
  bool find_unmatched(uint64_t tag, uint64_t mask, uint64_t* sender_tag) override;
  void check(Transfer& transfer) override;
  unsigned progress() override;
  bool thread_safe() const override { return thread_safe_; }
  void shutdown(bool graceful) override;
  const TransportCounters& counters() const override { return counters_; }
  void count_direct_traffic(uint64_t sent, uint64_t received) override {
    counters_.bytes_sent += sent;
    counters_.bytes_received += received;
  }
  bool sends_may_linger() const override;
  std::string describe() const override;
  Bytes single_copy_probe_blob() override;
  bool single_copy_probe(const std::vector<Bytes>& blobs, const std::vector<bool>& same_host) override;
  void enable_single_copy(const std::vector<bool>& peers) override;
  size_t prefault_shared_memory() noexcept override;

  struct PeerState {
    UcxTransport* owner = nullptr;
    int rank = -1;
    std::atomic<ucs_status_t> status{UCS_OK};  // set by the error callback, on whichever thread progresses
  };

 private:
  void finish(Transfer& transfer, ucs_status_t status, size_t received_length);
  void finish_mismatch(Transfer& transfer, uint64_t sent_bytes);
  void start(Transfer& transfer, bool is_send, int peer, uint64_t tag, size_t bytes);
  void* ucx_send(int peer, uint64_t tag, const void* data, size_t bytes, ucs_status_t* status,
                 SendMode mode = SendMode::kDefault);
  void* ucx_recv(uint64_t tag, void* data, size_t bytes, ucs_status_t* status, uint64_t unmatched_bits = 0);
  ucs_status_t poll_request(void** handle, bool is_recv, size_t* length, uint64_t* sender_tag = nullptr);
  // A receive whose message carries another call's fingerprint: fail it (true), else false.
  bool fail_on_tag_mismatch(Transfer& transfer);
  void discard_unmatched();
  bool single_copy_peer(int peer) const;
  // Single-copy sends are taken from this size whatever their mode, so a receive this large expects a header.
  size_t always_single_copy_bytes() const { return std::max(single_copy_bytes_, kEagerSingleCopyMin); }
  void read_single_copy(Transfer& transfer);
  void close_endpoints(bool graceful);

  int rank_;
  int nranks_;
  ucp_context_h context_ = nullptr;
  ucp_worker_h worker_ = nullptr;
  std::vector<ucp_ep_h> endpoints_;
  std::vector<std::unique_ptr<PeerState>> peers_;
  PendingTransfers pending_;
  TransportCounters counters_;
  bool shut_down_ = false;
  bool closing_ = false;      // shutdown in progress: requests are only collected, no new ones posted
  bool thread_safe_ = false;  // the worker is UCS_THREAD_MODE_MULTI
  std::vector<bool> single_copy_peers_;
  size_t single_copy_bytes_;
  std::vector<SharedMapping> shared_before_;  // the process's shared mappings before UCX made its own
  uint64_t probe_word_ = 0;
  uint32_t next_ack_id_ = 0;
  const uint32_t pid_ = static_cast<uint32_t>(getpid());  // for single-copy headers (getpid is a system call)
};

}  // namespace bagua

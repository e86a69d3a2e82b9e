// Transport over UCX ucp: one context and worker per communicator, one endpoint per rank, tag matching.
// Error handling keeps shared memory (peer mode with MM_ERROR_HANDLING) and a keepalive of timeout/3.
#pragma once

#include <ucp/api/ucp.h>

#include <memory>
#include <unordered_set>

#include "transport/transport.h"

namespace bagua {

class UcxTransport : public Transport {
 public:
  UcxTransport(int rank, int nranks, int timeout_ms);
  ~UcxTransport() override;

  Bytes local_address() override;
  void connect(const std::vector<Bytes>& addresses) override;
  void post_send(Transfer& transfer, int peer, uint64_t tag, const void* data, size_t bytes) override;
  void post_recv(Transfer& transfer, int peer, uint64_t tag, void* data, size_t bytes) override;
  void check(Transfer& transfer) override;
  unsigned progress() override;
  std::string peer_failure(int peer) const override;
  void shutdown(bool graceful) override;
  const TransportCounters& counters() const override { return counters_; }
  std::string describe() const override;

  struct PeerState {
    UcxTransport* owner = nullptr;
    int rank = -1;
    ucs_status_t status = UCS_OK;
  };

 private:
  void finish(Transfer& transfer, ucs_status_t status, size_t received_length);
  void close_endpoints(bool graceful);

  int rank_;
  int nranks_;
  ucp_context_h context_ = nullptr;
  ucp_worker_h worker_ = nullptr;
  std::vector<ucp_ep_h> endpoints_;
  std::vector<std::unique_ptr<PeerState>> peers_;
  std::unordered_set<Transfer*> pending_;
  TransportCounters counters_;
  bool shut_down_ = false;
};

}  // namespace bagua

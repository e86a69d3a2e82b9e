// Where a communicator's ranks live: which ranks share a host, this rank's place on its host, and the ring order
// that keeps a host's ranks next to each other. Computed from the host identities of the rank table, identically
// on every rank.
#pragma once

#include <string>
#include <vector>

#include "topology/host_identity.h"

namespace bagua {

class CommLayout {
 public:
  CommLayout() = default;
  // host_ids[r]: the host identity of rank r (detect_host_id on that rank).
  CommLayout(const std::vector<std::string>& host_ids, int rank);

  int local_rank() const { return placement_.local_rank; }
  int local_size() const { return placement_.local_size; }
  int host_index() const { return placement_.host_index; }
  int nhosts() const { return placement_.nhosts; }
  // Host index (numbered by first appearance in rank order) of any rank.
  int host_of(int rank) const { return host_index_[rank]; }
  // Ranks on each host, hosts in host-index order, ranks ascending.
  const std::vector<std::vector<int>>& hosts() const { return hosts_; }
  // Ranks sorted by (host, local rank): rings follow it so that a host's ranks are neighbours.
  const std::vector<int>& ring_order() const { return ring_order_; }

 private:
  LocalPlacement placement_;
  std::vector<int> host_index_;
  std::vector<std::vector<int>> hosts_;
  std::vector<int> ring_order_;
};

}  // namespace bagua

#include "core/comm_layout.h"

namespace bagua {

CommLayout::CommLayout(const std::vector<std::string>& host_ids, int rank) : placement_(place_rank(host_ids, rank)) {
  const int nranks = static_cast<int>(host_ids.size());
  for (int r = 0; r < nranks; ++r) host_index_.push_back(place_rank(host_ids, r).host_index);
  hosts_.assign(placement_.nhosts, {});
  for (int r = 0; r < nranks; ++r) hosts_[host_index_[r]].push_back(r);
  for (const auto& host : hosts_) ring_order_.insert(ring_order_.end(), host.begin(), host.end());
}

}  // namespace bagua

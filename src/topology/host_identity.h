// Which ranks share a host: boot_id plus the IPC namespace inode, the same test UCX uses to decide
// shared-memory reachability. BAGUA_HOST_ID overrides it.
#pragma once

#include <string>
#include <vector>

namespace bagua {

std::string detect_host_id();

// The machine, whatever the namespaces: boot_id (hostname without it). Ranks with the same machine id share its
// cores even when their host ids differ (containers, the network-namespace test bed, BAGUA_HOST_ID).
std::string detect_machine_id();

struct LocalPlacement {
  int local_rank = 0;
  int local_size = 1;
  int host_index = 0;  // hosts numbered in order of their lowest rank
  int nhosts = 1;
};

// Local rank = number of lower ranks with the same host id.
LocalPlacement place_rank(const std::vector<std::string>& host_ids, int rank);

}  // namespace bagua

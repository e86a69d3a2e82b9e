#include "topology/host_identity.h"

#include "base/env.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <map>

#include <fmt/format.h>

namespace bagua {

std::string detect_machine_id() {
  std::string boot_id;
  std::ifstream("/proc/sys/kernel/random/boot_id") >> boot_id;
  if (boot_id.empty()) {
    char name[256] = {0};
    gethostname(name, sizeof(name) - 1);
    boot_id = name;
  }
  return boot_id.substr(0, 200);
}

std::string detect_host_id() {
  if (const char* forced = env_get_nonempty("BAGUA_HOST_ID")) return std::string(forced).substr(0, 200);
  const std::string boot_id = detect_machine_id();
  struct stat st {};
  unsigned long long ipc_inode = stat("/proc/self/ns/ipc", &st) == 0 ? static_cast<unsigned long long>(st.st_ino) : 0;
  return fmt::format("{}/ipc:{}", boot_id, ipc_inode);
}

LocalPlacement place_rank(const std::vector<std::string>& host_ids, int rank) {
  LocalPlacement out;
  // Hosts are numbered by first appearance in rank order.
  std::map<std::string, int> first_seen;
  for (const std::string& id : host_ids)
    if (!first_seen.count(id)) first_seen[id] = static_cast<int>(first_seen.size());
  out.nhosts = static_cast<int>(first_seen.size());
  out.host_index = first_seen[host_ids[rank]];
  out.local_rank = 0;
  out.local_size = 0;
  for (int r = 0; r < static_cast<int>(host_ids.size()); ++r) {
    if (host_ids[r] != host_ids[rank]) continue;
    if (r < rank) ++out.local_rank;
    ++out.local_size;
  }
  return out;
}

}  // namespace bagua

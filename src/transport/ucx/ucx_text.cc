#include "transport/ucx/ucx_text.h"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <sstream>
#include <vector>

namespace bagua {

namespace {

bool any_equals(const std::string& name, std::initializer_list<const char*> names) {
  return std::any_of(names.begin(), names.end(), [&](const char* n) { return name == n; });
}

bool is_local_transport(const std::string& name) {
  return any_equals(name, {"self", "posix", "sysv", "xpmem", "cma", "knem", "cuda_copy", "cuda_ipc", "gdr_copy",
                           "rocm_copy", "rocm_ipc", "rocm_gdr"});
}

// One lane line after "lane[N]:" (as ucp_ep_config_lane_info_str prints it): false when it cannot be read.
bool read_lane(const std::string& rest, std::string* transport, bool* carries_messages, bool* connection_manager) {
  size_t at = rest.find_first_not_of(' ');
  if (at == std::string::npos) return false;
  *connection_manager = rest.compare(at, 3, "cm ") == 0;
  if (*connection_manager) return true;
  size_t digits = at;
  while (digits < rest.size() && std::isdigit(static_cast<unsigned char>(rest[digits]))) ++digits;
  if (digits == at || digits >= rest.size() || rest[digits] != ':') return false;
  const size_t slash = rest.find('/', digits + 1);
  if (slash == std::string::npos || slash == digits + 1) return false;
  *transport = rest.substr(digits + 1, slash - digits - 1);
  // The flags follow the arrow to the remote memory domain.
  const size_t arrow = rest.find("->", slash);
  if (arrow == std::string::npos) return false;
  std::istringstream flags(rest.substr(arrow + 2));
  *carries_messages = false;
  for (std::string word; flags >> word;)
    *carries_messages = *carries_messages || word == "am" || word.rfind("am_bw#", 0) == 0 || word == "tag_offload";
  return true;
}

}  // namespace

bool ucx_tls_allows(const char* tls, std::initializer_list<const char*> members,
                    std::initializer_list<const char*> aliases) {
  if (tls == nullptr || *tls == '\0') return true;
  std::string list = tls;
  const bool leave_out = list[0] == '^';
  if (leave_out) list.erase(0, 1);
  std::vector<std::string> named;  // the members the list names, directly or through an alias
  std::stringstream entries(list);
  for (std::string entry; std::getline(entries, entry, ',');) {
    const bool strict = !entry.empty() && entry[0] == '\\';
    if (strict) entry.erase(0, 1);
    if (entry.size() > 4 && entry.compare(entry.size() - 4, 4, ":aux") == 0) entry.resize(entry.size() - 4);
    if (!leave_out && entry == "all") return true;
    if (!strict && any_equals(entry, aliases)) return !leave_out;
    if (any_equals(entry, members)) named.push_back(entry);
  }
  if (!leave_out) return !named.empty();
  // Left out: only when every member is named.
  return !std::all_of(members.begin(), members.end(),
                      [&](const char* m) { return std::find(named.begin(), named.end(), m) != named.end(); });
}

std::string ucx_config_value(const std::string& config_text, const std::string& name) {
  const std::string prefix = name + "=";
  std::istringstream lines(config_text);
  for (std::string line; std::getline(lines, line);)
    if (line.compare(0, prefix.size(), prefix) == 0) return line.substr(prefix.size());
  return "";
}

bool lanes_may_linger(const std::string& ep_info) {
  bool any_endpoint = false, any_lane = false;
  std::istringstream lines(ep_info);
  for (std::string line; std::getline(lines, line);) {
    if (line.find("UCP endpoint") != std::string::npos) any_endpoint = true;
    const size_t lane = line.find("lane[");
    if (lane == std::string::npos) continue;
    const size_t close = line.find("]:", lane);
    std::string transport;
    bool carries_messages = false, connection_manager = false;
    if (close == std::string::npos ||
        !read_lane(line.substr(close + 2), &transport, &carries_messages, &connection_manager))
      return true;
    any_lane = true;
    if (!connection_manager && carries_messages && !is_local_transport(transport)) return true;
  }
  return any_endpoint && !any_lane;
}

}  // namespace bagua

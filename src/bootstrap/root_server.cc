#include "bootstrap/root_server.h"

#include <poll.h>

#include <thread>

#include "base/error.h"
#include "base/logging.h"
#include "bootstrap/hmac.h"

namespace bagua {

namespace {
constexpr int kHandshakeTimeoutMs = 5000;
constexpr int kReplyTimeoutMs = 2000;

std::string rank_list(const std::vector<int>& ranks) {
  std::string out;
  for (size_t i = 0; i < ranks.size() && i < 16; ++i) out += (i ? ", " : "") + std::to_string(ranks[i]);
  if (ranks.size() > 16) out += fmt::format(" and {} more", ranks.size() - 16);
  return out;
}
}  // namespace

RootServer::RootServer(Socket listener, Bytes secret, Mode mode)
    : acceptor_(std::move(listener), std::move(secret), kHandshakeTimeoutMs, "bootstrap root"), mode_(mode) {
  address_ = acceptor_.listener().local_address().str();
}

RootServer::~RootServer() = default;

void RootServer::start_detached(Socket listener, Bytes secret, Mode mode, int idle_limit_ms) {
  auto server = std::make_shared<RootServer>(std::move(listener), std::move(secret), mode);
  std::thread([server, idle_limit_ms] {
    static const std::atomic<bool> never(false);
    try {
      server->run(never, idle_limit_ms);
    } catch (const std::exception& e) {
      BAGUA_ERROR("bootstrap root stopped: {}", e.what());
    }
  }).detach();
}

void RootServer::run(const std::atomic<bool>& stop, int idle_limit_ms) {
  Deadline idle = Deadline::after_ms(idle_limit_ms);
  while (!stop.load()) {
    for (AcceptedPeer& peer : acceptor_.poll(50)) admit(std::move(peer));
    drop_departed_members();
    expire_groups();
    if (mode_ == Mode::kOneGroup && served_one_) return;
    if (!groups_.empty() || acceptor_.pending() > 0) idle = Deadline::after_ms(idle_limit_ms);
    if (idle.expired()) {
      BAGUA_DEBUG("bootstrap root at {}: idle, stopping", address_);
      return;
    }
  }
}

void RootServer::reply_error(Socket& sock, bagua_status_t status, const std::string& message) {
  try {
    send_frame(sock, FrameType::kError, encode_error(status, message), Deadline::after_ms(kReplyTimeoutMs));
  } catch (const Error&) {
    // The rank is gone already; nothing more to tell it.
  }
}

void RootServer::admit(AcceptedPeer peer) {
  JoinRequest req;
  try {
    req = JoinRequest::decode(peer.hello_body);
  } catch (const Error& e) {
    BAGUA_WARN("bootstrap root: refused join from {}: {}", peer.address, e.what());
    reply_error(peer.sock, BAGUA_ERR_INVALID_USAGE, fmt::format("rendezvous root refused the join: {}", e.what()));
    return;
  }
  if (mode_ == Mode::kOneGroup && !groups_.empty() && groups_.begin()->first != req.group_key) {
    BAGUA_WARN("bootstrap root: refused rank {} from {}: it belongs to another job", req.rank, peer.address);
    reply_error(peer.sock, BAGUA_ERR_INVALID_USAGE, "this rendezvous root serves another job");
    return;
  }
  auto [it, created] = groups_.try_emplace(req.group_key);
  Group& group = it->second;
  if (created) {
    group.nranks = req.nranks;
    group.config_hash = req.config_hash;
    group.deadline = Deadline::after_ms(req.timeout_ms);
  }
  if (req.nranks != group.nranks) {
    BAGUA_WARN("bootstrap root: rank {} from {} says nranks={}, the job has {}", req.rank, peer.address, req.nranks,
               group.nranks);
    reply_error(peer.sock, BAGUA_ERR_INVALID_USAGE,
                fmt::format("rank {} was started with nranks={} but the job has nranks={}", req.rank, req.nranks,
                            group.nranks));
    return;
  }
  if (group.members.count(req.rank)) {
    BAGUA_WARN("bootstrap root: duplicate rank {} from {} refused", req.rank, peer.address);
    reply_error(peer.sock, BAGUA_ERR_INVALID_USAGE,
                fmt::format("rank {} has already joined this job (from pid {} on {})", req.rank,
                            group.members[req.rank].request.info.pid, group.members[req.rank].request.info.hostname));
    return;
  }
  if (req.config_hash != group.config_hash) {
    reply_error(
        peer.sock, BAGUA_ERR_INVALID_USAGE,
        fmt::format("rank {}'s configuration (BAGUA_ALGO, library version) differs from the other ranks'", req.rank));
    fail_group(group, BAGUA_ERR_INVALID_USAGE,
               fmt::format("rank {}'s configuration (BAGUA_ALGO, library version) differs from this rank's", req.rank));
    groups_.erase(it);
    return;
  }
  BAGUA_DEBUG("bootstrap root: rank {}/{} joined from {}", req.rank, req.nranks, peer.address);
  int rank = req.rank;
  group.members[rank] = Member{std::move(peer.sock), std::move(req)};
  if (static_cast<int>(group.members.size()) == group.nranks) {
    complete(it->first, group);
    groups_.erase(it);
  }
}

void RootServer::complete(uint64_t key, Group& group) {
  JobTable table;
  const Bytes id = random_bytes(8);
  Reader id_reader(id, "id");
  table.comm_id = id_reader.u64();
  for (auto& [rank, member] : group.members) table.ranks.push_back(member.request.info);
  Bytes payload = table.encode();
  for (auto& [rank, member] : group.members) {
    try {
      send_frame(member.sock, FrameType::kTable, payload, Deadline::after_ms(kReplyTimeoutMs));
    } catch (const Error& e) {
      BAGUA_WARN("bootstrap root: could not send the job table to rank {}: {}", rank, e.what());
    }
  }
  BAGUA_INFO("bootstrap root at {}: job {:#x} formed with {} ranks", address_, key, group.nranks);
  served_one_ = true;
}

void RootServer::fail_group(Group& group, bagua_status_t status, const std::string& message) {
  for (auto& [rank, member] : group.members) reply_error(member.sock, status, message);
  if (mode_ == Mode::kOneGroup) served_one_ = true;
}

void RootServer::drop_departed_members() {
  for (auto& [key, group] : groups_) {
    for (auto it = group.members.begin(); it != group.members.end();) {
      pollfd pfd{it->second.sock.fd(), POLLIN, 0};
      uint8_t byte;
      // A waiting rank sends nothing; readable means it closed (or broke the protocol).
      if (::poll(&pfd, 1, 0) > 0 && it->second.sock.try_recv(&byte, 1) != 0) {
        BAGUA_WARN("bootstrap root: rank {} left before the job formed", it->first);
        it = group.members.erase(it);
      } else {
        ++it;
      }
    }
  }
}

void RootServer::expire_groups() {
  for (auto it = groups_.begin(); it != groups_.end();) {
    Group& group = it->second;
    if (!group.deadline.expired()) {
      ++it;
      continue;
    }
    std::vector<int> missing;
    for (int r = 0; r < group.nranks; ++r)
      if (!group.members.count(r)) missing.push_back(r);
    std::string message =
        fmt::format("timed out waiting for {} of {} ranks to join the rendezvous at {}: missing rank{} {}",
                    missing.size(), group.nranks, address_, missing.size() == 1 ? "" : "s", rank_list(missing));
    BAGUA_WARN("bootstrap root: {}", message);
    fail_group(group, BAGUA_ERR_TIMEOUT, message);
    it = groups_.erase(it);
  }
}

}  // namespace bagua

// Rendezvous messages: what a rank tells the root (HELLO body) and what the root sends back (TABLE).
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "bagua/bagua.h"
#include "base/deadline.h"
#include "bootstrap/socket.h"
#include "bootstrap/wire.h"

namespace bagua {

constexpr int kMaxRanks = 1 << 20;

struct RankInfo {
  std::string host_id;  // topology/host_identity.h
  std::string hostname;
  uint32_t pid = 0;
  uint32_t pid_namespace = 0;  // base/process_identity.h: the pid names a process only within it
  std::string listen_addr;     // this rank's bootstrap ring listener, "ip:port"
};

// RankInfo on the wire (join requests, job tables, splits, shrink).
void write_rank_info(Writer& w, const RankInfo& info);
RankInfo read_rank_info(Reader& r);

struct JoinRequest {
  uint64_t group_key = 0;  // which job: the unique id's key, or the init_from_env generation
  int32_t rank = -1;
  int32_t nranks = 0;
  uint64_t config_hash = 0;
  int32_t timeout_ms = 0;
  RankInfo info;

  Bytes encode() const;
  static JoinRequest decode(const Bytes& body);  // throws REMOTE (malformed) on any bad field
};

struct JobTable {
  uint64_t comm_id = 0;
  std::vector<RankInfo> ranks;

  Bytes encode() const;
  static JobTable decode(const Bytes& payload, int expected_nranks);
};

// Joins the job over a connection to the root; returns the table once every rank has joined, or throws
// the root's error (a timeout names the missing ranks).
JobTable join_job(Socket& root, const Bytes& secret, const JoinRequest& request, Deadline deadline,
                  const std::atomic<bool>* stop);

}  // namespace bagua

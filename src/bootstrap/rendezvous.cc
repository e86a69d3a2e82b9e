#include "bootstrap/rendezvous.h"

#include "base/error.h"
#include "bootstrap/handshake.h"

namespace bagua {

namespace {
constexpr size_t kMaxIdentity = 256;

}  // namespace

void write_rank_info(Writer& w, const RankInfo& info) {
  w.str(info.host_id);
  w.str(info.hostname);
  w.u32(info.pid);
  w.u32(info.pid_namespace);
  w.str(info.listen_addr);
}

RankInfo read_rank_info(Reader& r) {
  RankInfo info;
  info.host_id = r.str(kMaxIdentity);
  info.hostname = r.str(kMaxIdentity);
  info.pid = r.u32();
  info.pid_namespace = r.u32();
  info.listen_addr = r.str(kMaxIdentity);
  return info;
}

Bytes JoinRequest::encode() const {
  Writer w;
  w.u64(group_key);
  w.i32(rank);
  w.i32(nranks);
  w.u64(config_hash);
  w.i32(timeout_ms);
  write_rank_info(w, info);
  return std::move(w.out());
}

JoinRequest JoinRequest::decode(const Bytes& body) {
  Reader r(body, "join request");
  JoinRequest req;
  req.group_key = r.u64();
  req.rank = r.i32();
  req.nranks = r.i32();
  req.config_hash = r.u64();
  req.timeout_ms = r.i32();
  req.info = read_rank_info(r);
  r.expect_end();
  if (req.nranks < 1 || req.nranks > kMaxRanks)
    fail(BAGUA_ERR_INVALID_USAGE, "nranks {} is outside [1, {}]", req.nranks, kMaxRanks);
  if (req.rank < 0 || req.rank >= req.nranks)
    fail(BAGUA_ERR_INVALID_USAGE, "rank {} is outside [0, {})", req.rank, req.nranks);
  if (req.timeout_ms <= 0) fail(BAGUA_ERR_INVALID_USAGE, "timeout {} ms is not positive", req.timeout_ms);
  return req;
}

Bytes JobTable::encode() const {
  Writer w;
  w.u64(comm_id);
  w.u32(static_cast<uint32_t>(ranks.size()));
  for (const RankInfo& info : ranks) write_rank_info(w, info);
  return std::move(w.out());
}

JobTable JobTable::decode(const Bytes& payload, int expected_nranks) {
  Reader r(payload, "job table");
  JobTable table;
  table.comm_id = r.u64();
  uint32_t n = r.u32();
  if (static_cast<int>(n) != expected_nranks)
    fail(BAGUA_ERR_REMOTE, "job table lists {} ranks, expected {}", n, expected_nranks);
  table.ranks.reserve(n);
  for (uint32_t i = 0; i < n; ++i) table.ranks.push_back(read_rank_info(r));
  r.expect_end();
  return table;
}

JobTable join_job(Socket& sock, const Bytes& secret, const JoinRequest& request, Deadline deadline,
                  const std::atomic<bool>* stop) {
  std::string root = sock.peer_address().str();
  client_handshake(sock, secret, request.encode(), deadline, stop);
  Frame reply;
  try {
    reply = recv_frame(sock, deadline, stop);
  } catch (const Error& e) {
    if (e.status() == BAGUA_ERR_TIMEOUT)
      fail(BAGUA_ERR_TIMEOUT, "rank {}: no job table from the rendezvous root at {} within the timeout", request.rank,
           root);
    if (e.status() == BAGUA_ERR_REMOTE)
      fail(BAGUA_ERR_REMOTE, "rank {}: the rendezvous root at {} went away: {}", request.rank, root, e.what());
    throw;
  }
  if (reply.type == FrameType::kError) {
    raise_error_frame(reply.payload);
  }
  if (reply.type != FrameType::kTable)
    fail(BAGUA_ERR_REMOTE, "rendezvous root sent {} instead of the job table", frame_type_name(reply.type));
  return JobTable::decode(reply.payload, request.nranks);
}

}  // namespace bagua

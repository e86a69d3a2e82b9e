// Agreement on the survivors of a communicator, for bagua_comm_shrink (docs/bootstrap.md, "Shrink").
// The old ranks meet again over a fresh, authenticated TCP mesh between their recovery listeners (each rank dials
// every other: it sends on the connection it dialled and reads on the one it accepted) and run one instance of
// Paxos whose value is the membership:
//   leader:   PREPARE(b) -> PROMISE from a majority of the old ranks, and from every rank not known dead or until
//             the grace period ends -> ACCEPT(b, members) -> ACCEPTED from a majority -> DECIDE(members)
//   everyone: a Paxos acceptor; passes DECIDE on to every peer it is connected to before returning.
// The leader is the lowest rank not known dead (its connection refused or closed) nor silent for the grace period
// (every rank sends a heartbeat to its peers). A leader whose phase stalls for the grace period starts a higher
// ballot. Both steps need a majority of the old ranks, so under a network partition only
// a side holding a majority decides, and no two ranks ever return different members. bagua_comm_shrink runs it
// twice: the old ranks on the survivors, then the new members on whether each of them formed the new communicator.
#pragma once

#include <atomic>
#include <string>
#include <vector>

#include "base/bytes.h"
#include "base/deadline.h"
#include "bootstrap/socket.h"

namespace bagua {

struct AgreementMember {
  int old_rank = -1;
  Bytes payload;  // what that rank contributed (the survivors: its new listener; the formation: whether it formed)
};

struct AgreementParams {
  int rank = 0;
  int nranks = 1;
  std::vector<std::string> addresses;  // every old rank's recovery listener, "ip:port"
  Bytes secret;                        // the job secret; empty: unauthenticated
  uint64_t session = 0;                // the same on every rank of one agreement, different for the next one
  Bytes payload;                       // this rank's contribution
  int grace_ms = 1000;                 // how long an unreachable rank is waited for
};

// Returns the agreed members in old-rank order, the same on every rank that returns; this rank may be absent (it
// came too late). Throws REMOTE when fewer than a majority of the old ranks could be reached before the deadline
// (naming those reached), TIMEOUT when they could but did not decide, ABORTED when *stop is set.
std::vector<AgreementMember> agree_on_survivors(const AgreementParams& params, const Socket& listener,
                                                Deadline deadline, const std::atomic<bool>* stop);

}  // namespace bagua

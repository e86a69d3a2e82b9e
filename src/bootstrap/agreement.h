// Agreement among the ranks of a communicator, for bagua_comm_shrink (docs/bootstrap.md, "Shrink"), which runs it
// twice: the old ranks on the survivors, then the new members on whether each of them formed the new communicator.
// The participants meet over a fresh, authenticated TCP mesh between their recovery listeners (each dials every
// other: it sends on the connection it dialled and reads on the one it accepted) and run one instance of Paxos
// whose value is a list of participants with what each contributed:
//   leader:   PREPARE(b) -> PROMISE from a majority of the participants, and from every one not known dead or until
//             the grace period ends -> ACCEPT(b, members) -> ACCEPTED from a majority -> DECIDE(members)
//   everyone: a Paxos acceptor; passes DECIDE on to every peer it is connected to before returning.
// The leader is the lowest participant not known dead (its connection refused or closed) nor silent for the grace
// period (every one sends a heartbeat to its peers). A leader whose phase stalls for the grace period starts a
// higher ballot. Both steps need a majority of the participants, so under a network partition only a side holding
// a majority decides, and no two participants ever return different lists.
#pragma once

#include <atomic>
#include <chrono>
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

// The participants are ranks 0..nranks-1: the old ranks in the agreement on survivors, the new members (by new rank)
// in the one on the formation.
struct AgreementParams {
  int rank = 0;
  int nranks = 1;
  std::vector<std::string> addresses;      // every participant's recovery listener, "ip:port"
  Bytes secret;                            // the job secret; empty: unauthenticated
  uint64_t session = 0;                    // the same on every rank of one agreement, different for the next one
  Bytes payload;                           // this rank's contribution
  int grace_ms = 1000;                     // how long an unreachable rank is waited for
  std::string participants = "old ranks";  // what the ranks are, for messages
  // Until then no rank counts as silent, and a leader waits for every rank not known dead (then the grace period
  // more): for ranks known to arrive late, by up to that time.
  std::chrono::steady_clock::time_point wait_all_until{};
};

// Returns the agreed list in rank order, the same on every participant that returns; this one may be absent (it
// came too late). Throws REMOTE when fewer than a majority of the participants could be reached before the deadline
// (naming those reached), TIMEOUT when they could but did not decide, ABORTED when *stop is set.
std::vector<AgreementMember> run_agreement(const AgreementParams& params, const Socket& listener, Deadline deadline,
                                           const std::atomic<bool>* stop);

}  // namespace bagua

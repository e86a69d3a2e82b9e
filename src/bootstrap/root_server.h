// The rendezvous root: collects one JoinRequest per rank of a job, checks them, and sends every rank the
// job table. Lives in a thread of the process that made the unique id (or of rank 0, or of bagua-run).
#pragma once

#include <atomic>
#include <map>
#include <memory>

#include "bootstrap/handshake.h"
#include "bootstrap/rendezvous.h"

namespace bagua {

class RootServer {
 public:
  enum class Mode {
    kOneGroup,  // serve one job, then stop (unique id, or rank 0 under torchrun/mpirun/srun)
    kForever,   // serve every job that comes until stopped (bagua-run: one per bagua_comm_init_from_env)
  };

  RootServer(Socket listener, Bytes secret, Mode mode);
  ~RootServer();

  // Serves until the mode says it is done, `stop` is set, or idle_limit_ms passes with no job in progress.
  void run(const std::atomic<bool>& stop, int idle_limit_ms);
  static void start_detached(Socket listener, Bytes secret, Mode mode, int idle_limit_ms);

  const std::string& address() const { return address_; }

 private:
  struct Member {
    Socket sock;
    JoinRequest request;
  };
  struct Group {
    int nranks = 0;
    uint64_t config_hash = 0;
    Deadline deadline{Clock::now()};
    std::map<int, Member> members;
  };

  void admit(AcceptedPeer peer);
  void complete(uint64_t key, Group& group);
  void fail_group(Group& group, bagua_status_t status, const std::string& message);
  void drop_departed_members();
  void expire_groups();
  void reply_error(Socket& sock, bagua_status_t status, const std::string& message);

  Acceptor acceptor_;
  Mode mode_;
  std::string address_;
  std::map<uint64_t, Group> groups_;
  bool served_one_ = false;
};

}  // namespace bagua

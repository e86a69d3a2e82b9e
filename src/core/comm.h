// The communicator: who the ranks are, where they live, and the state every operation shares
// (configuration, bootstrap ring, poison status, last error).
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "bagua/bagua.h"
#include "bootstrap/rendezvous.h"
#include "bootstrap/ring.h"
#include "core/config.h"
#include "core/error.h"
#include "topology/host_identity.h"

namespace bagua {

// How a rank finds the rendezvous root.
struct RootLocation {
  SockAddr address;        // used when root_file is empty
  std::string root_file;   // BAGUA_ROOT_FILE: rank 0 writes "host:port", the others poll it
  Bytes secret;            // empty: unauthenticated
  uint64_t group_key = 0;
};

class Comm {
 public:
  // Joins the job: rendezvous at the root, then the bootstrap ring. Throws on any failure.
  static std::unique_ptr<Comm> create(int nranks, int rank, const RootLocation& root, const Config& config);
  ~Comm();

  int rank() const { return rank_; }
  int size() const { return nranks_; }
  int local_rank() const { return placement_.local_rank; }
  int local_size() const { return placement_.local_size; }
  int nhosts() const { return placement_.nhosts; }
  uint64_t id() const { return comm_id_; }
  const Config& config() const { return config_; }
  const std::vector<RankInfo>& ranks() const { return ranks_; }
  Deadline op_deadline() const { return Deadline::after_ms(config_.timeout_ms); }

  // Runs one operation: refuses on a poisoned communicator, and poisons it when the operation fails
  // with TIMEOUT, REMOTE or ABORTED.
  template <typename F>
  void run_op(F&& body) {
    check_usable();
    try {
      body();
    } catch (const Error& e) {
      if (is_poisoning(e.status())) poison(e.status(), e.what());
      throw;
    }
  }

  void barrier();
  // From any thread: poison with ABORTED and wake whatever is blocked.
  void abort();
  void check_usable() const;
  bool poisoned() const { return poison_status_.load() != BAGUA_SUCCESS; }
  bagua_status_t poison_status() const { return poison_status_.load(); }
  const std::atomic<bool>* abort_flag() const { return &abort_requested_; }
  BootstrapRing& ring() { return *ring_; }

  void set_last_error(const std::string& message);
  const char* last_error();

  static bool is_poisoning(bagua_status_t status) {
    return status == BAGUA_ERR_TIMEOUT || status == BAGUA_ERR_REMOTE || status == BAGUA_ERR_ABORTED;
  }
  void poison(bagua_status_t status, const std::string& message);

 private:
  Comm() = default;

  int rank_ = 0;
  int nranks_ = 1;
  uint64_t comm_id_ = 0;
  Config config_;
  std::vector<RankInfo> ranks_;
  LocalPlacement placement_;
  std::unique_ptr<BootstrapRing> ring_;

  std::atomic<bool> abort_requested_{false};
  std::atomic<bagua_status_t> poison_status_{BAGUA_SUCCESS};
  mutable std::mutex mutex_;  // guards the strings below
  std::string poison_message_;
  std::string last_error_;
  std::string last_error_view_;  // stable copy handed to callers of last_error()
};

}  // namespace bagua

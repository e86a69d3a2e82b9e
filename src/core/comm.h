// The communicator: who the ranks are, where they live, and the state every operation shares
// (configuration, bootstrap ring, transport, progress engine, poison status, last error). Its methods live in
// three files: comm_init.cc (joining, forming, splitting), comm_progress.cc (the engine, watchdog and health
// checks) and comm.cc (lifetime, poisoning, errors, counters); the layout is its own class (comm_layout.h).
#pragma once

#include <atomic>
#include <memory>
#include <mutex>

#include <string>
#include <vector>
#include "core/flight_recorder.h"

#include "bagua/bagua.h"
#include "base/error.h"
#include "bootstrap/rendezvous.h"
#include "bootstrap/ring.h"
#include "core/comm_layout.h"
#include "core/config.h"
#include "core/operation.h"
#include "topology/host_identity.h"
#include "transport/shared_segments.h"
#include "transport/transport.h"

namespace bagua {

struct AgreementParams;

// How a rank finds the rendezvous root.
struct RootLocation {
  SockAddr address;       // used when root_file is empty
  std::string root_file;  // BAGUA_ROOT_FILE: rank 0 writes "host:port", the others poll it
  Bytes secret;           // empty: unauthenticated
  uint64_t group_key = 0;
};

// State that a layer above core keeps per communicator (the algorithms' selector): the communicator owns it
// and knows nothing of its type.
class CommAttachment {
 public:
  virtual ~CommAttachment() = default;
};

class DeviceProxy;

class Comm {
 public:
  // Joins the job: rendezvous at the root, then the bootstrap ring. Throws on any failure.
  static std::unique_ptr<Comm> create(int nranks, int rank, const RootLocation& root, const Config& config);
  // Forms the communicator from a finished rendezvous: bootstrap ring, then transport.
  static std::unique_ptr<Comm> form(int rank, const JobTable& table, Socket listener, const Bytes& secret,
                                    const Config& config, Deadline deadline);
  // MPI_Comm_split over this communicator (collective); nullptr for BAGUA_SPLIT_NOCOLOR.
  std::unique_ptr<Comm> split(int color, int key);
  // bagua_comm_shrink: the ranks still alive agree on who they are (bootstrap/agreement.h) and form a new
  // communicator of them, in old-rank order. Accepted on a failed communicator; collective over the survivors.
  std::unique_ptr<Comm> shrink();
  ~Comm();

  int rank() const { return rank_; }
  int size() const { return nranks_; }
  // Where the ranks live (comm_layout.h).
  const CommLayout& layout() const { return layout_; }
  int local_rank() const { return layout_.local_rank(); }
  int local_size() const { return layout_.local_size(); }
  int nhosts() const { return layout_.nhosts(); }
  int host_of(int rank) const { return layout_.host_of(rank); }
  const std::vector<int>& ring_order() const { return layout_.ring_order(); }
  const std::vector<std::vector<int>>& hosts() const { return layout_.hosts(); }
  uint64_t id() const { return comm_id_; }
  const Config& config() const { return config_; }
  const std::vector<RankInfo>& ranks() const { return ranks_; }
  Deadline op_deadline() const { return Deadline::after_ms(config_.timeout_ms); }

  // From any thread: poison with ABORTED and wake whatever is blocked, on this communicator and on those linked
  // to it with link_for_abort.
  void abort();
  // `internal`, a communicator the library made from this one for its own thread (a scheduler's or an averager's
  // split), is aborted with it. The link goes when either is destroyed.
  void link_for_abort(Comm& internal);

  // Progress engine. start() registers an operation and advances it once; test() drives everything and
  // says whether `op` finished; wait() blocks until it does. Both throw the operation's error. An operation
  // that makes no progress for the timeout fails with TIMEOUT, naming what it waits for.
  void start(Operation& op);
  // One progress of the transport's own traffic, from the idle-progress thread (core/idle_progress.h), unless the
  // engine ran since the caller last looked (*seen: the engine passes it saw then) or runs now; true when it
  // progressed. Needs no engine lock, so it also reaches a communicator whose thread waits in bagua_comm_split.
  bool progress_transport_idle(uint64_t* seen) noexcept;
  // A pass over many operations (the device proxy's queue): the communicator is progressed, and the operations
  // ahead of an unwatched one are watched, once per pass rather than once per operation.
  struct TestPass {
    bool progressed = false;
    bool watched_ahead = false;
  };
  bool test(Operation& op, TestPass* pass = nullptr);
  void wait(Operation& op);
  // Releases an operation the caller no longer tracks (finished or failed).
  void forget(Operation& op);
  // Operations of requests still out when the communicator is about to be destroyed: takes each out of its slot
  // (which is left empty) and returns, in order, what its request ends with (its status and error, or ABORTED where
  // it had not finished), read under the engine's lock. The destructor fails the unfinished ones like its other
  // operations and frees them all once the transport has let go of their transfers. Throws only before it takes
  // anything.
  struct DetachedOutcome {
    bagua_status_t status = BAGUA_SUCCESS;
    std::string error;
  };
  std::vector<DetachedOutcome> adopt_detached(const std::vector<std::unique_ptr<Operation>*>& slots);

  uint64_t next_collective_sequence() { return collective_sequence_++; }
  // Operations of the library's own when a communicator is made (its calibration), kept out of the caller's
  // view. begin: the next `count` collectives take the last sequence numbers before the tags' numbers wrap, so the
  // caller's first call, #0, has the tags that follow theirs (a peer's message of it that arrives early is seen as
  // a later call's, not as a stale one). forget: back to #0, and out of the stats and the flight recorder. Every
  // rank calls both at the same points, with nothing in flight.
  void begin_setup_operations(int count);
  void forget_setup_operations();
  uint64_t next_send_sequence(int peer) { return send_sequence_[peer]++; }
  uint64_t next_recv_sequence(int peer) { return recv_sequence_[peer]++; }
  // Poisoning status after a non-blocking check of the neighbours (bagua_comm_get_async_error).
  bagua_status_t async_error();
  bagua_stats_t stats() const;
  // Time spent in compression kernels, for bagua_stats_t.compute_ns (any thread).
  void add_compute_ns(uint64_t ns) { compute_ns_.fetch_add(ns, std::memory_order_relaxed); }
  // A quantized allreduce sent at full precision, for bagua_stats_t.quantized_full_precision (any thread).
  void count_quantized_full_precision() { quantized_full_precision_.fetch_add(1, std::memory_order_relaxed); }
  // Whether every rank of each host can read and write its host peers' memory (agreed by all ranks at init).
  bool cross_memory() const { return cross_memory_; }
  // Registered with the idle-progress thread at init (core/idle_progress.h).
  bool idle_progress_registered() const { return idle_progress_; }
  // The ranks on this communicator's machine outnumber the cores they may use between them (the same on every
  // rank of a one-host communicator: computed from what every rank announced at init).
  bool ranks_outnumber_cores() const { return ranks_outnumber_cores_; }
  // Shared memory between the ranks of a one-host communicator (transport/shared_segments.h); nullptr when the
  // communicator spans hosts, has one rank, or cross_memory() is false.
  SharedSegments* shared_segments() const { return shared_segments_.get(); }
  CommAttachment* attachment() const { return attachment_.get(); }
  void set_attachment(std::unique_ptr<CommAttachment> attachment) { attachment_ = std::move(attachment); }
  // The device data path of this communicator (core/device_proxy.h), started on first use.
  DeviceProxy& device_proxy();
  bool has_device_proxy() const { return has_device_proxy_.load(std::memory_order_acquire); }
  void check_usable() const;
  bool poisoned() const { return poison_status_.load() != BAGUA_SUCCESS; }
  // Throws if the communicator was aborted or failed, or the bootstrap ring reports a failure now.
  void check_peers_now();
  bagua_status_t poison_status() const { return poison_status_.load(); }
  std::string poison_message() const;

  void set_last_error(const std::string& message);
  const char* last_error();

  static bool is_poisoning(bagua_status_t status) {
    return status == BAGUA_ERR_TIMEOUT || status == BAGUA_ERR_REMOTE || status == BAGUA_ERR_ABORTED;
  }
  void poison(bagua_status_t status, const std::string& message);
  // Poisons and fails every operation in flight now, from any thread (a failure outside the engine's loop).
  void fail_now(bagua_status_t status, const std::string& message);

  // Writes the flight recorder to path; empty path: to BAGUA_TRACE_DIR when set, else to the log.
  // Returns where it went. Throws SYSTEM when the file cannot be written.
  std::string dump_trace(const std::string& path, const std::string& reason);
  // The same from a caller's thread (bagua_comm_dump_trace): notes what running operations wait for first.
  std::string dump_trace_now(const std::string& path);

 private:
  Comm();
  // shrink's second agreement, among the new members (`members`: their old ranks), on whether each one formed the
  // new communicator: "" when every one did, else which did not.
  std::string agree_on_formation(const std::vector<int>& members, int new_rank, const AgreementParams& survivors,
                                 bool formed, Deadline formation_deadline);

  int rank_ = 0;
  int nranks_ = 1;
  uint64_t comm_id_ = 0;
  Config config_;
  std::vector<RankInfo> ranks_;
  CommLayout layout_;
  std::unique_ptr<BootstrapRing> ring_;
  Bytes secret_;        // the job secret, for the rings of split communicators
  SockAddr listen_ip_;  // interface address (port 0) for new listeners
  uint64_t split_count_ = 0;
  Socket recovery_listener_;                     // where shrink's agreement meets
  std::vector<std::string> recovery_addresses_;  // every rank's recovery listener
  uint64_t shrink_count_ = 0;
  std::atomic<bool> shrink_stop_{false};  // set by abort(): a running shrink gives up
  std::unique_ptr<Transport> transport_;
  bool cross_memory_ = false;
  bool ranks_outnumber_cores_ = false;
  std::unique_ptr<SharedSegments> shared_segments_;
  std::unique_ptr<CommAttachment> attachment_;
  std::mutex device_proxy_mutex_;
  std::unique_ptr<DeviceProxy> device_proxy_;
  std::atomic<bool> has_device_proxy_{false};  // device_proxy_ was made (read on every call without the lock)

  // Engine state, used by one thread at a time; abort() takes engine_mutex_ to tear down safely.
  std::timed_mutex engine_mutex_;
  std::atomic<uint64_t> engine_passes_{0};  // progress_all calls, for the idle-progress thread
  // Registered with the idle-progress thread (set before, never changed after).
  bool idle_progress_ = false;
  // Held by the engine's passes (start, test) and around the transport's shutdown when idle_progress_ is set; the
  // idle-progress thread only tries it. Recursive: a pass may fail everything, which shuts the transport down.
  std::recursive_mutex transport_mutex_;
  struct TransportLock {
    explicit TransportLock(Comm& comm) : lock(comm.transport_mutex_, std::defer_lock) {
      if (comm.idle_progress_) lock.lock();
    }
    std::unique_lock<std::recursive_mutex> lock;
  };
  std::vector<Operation*> active_;
  std::vector<std::unique_ptr<Operation>> detached_;  // adopt_detached's, freed by the destructor
  // link_for_abort: the communicators this one aborts, and the set this one is in (its parent's).
  struct AbortLinks {
    std::mutex mutex;
    std::vector<Comm*> linked;
  };
  std::shared_ptr<AbortLinks> abort_links_ = std::make_shared<AbortLinks>();
  std::weak_ptr<AbortLinks> aborted_with_;
  struct Watch {
    uint64_t events = 0;
    CoarseClock::time_point last_progress;
    bool mismatch_checked = false;  // this stall was checked for a message of another call
  };
  static constexpr int kMismatchCheckMs = 20;
  std::vector<std::pair<Operation*, Watch>> watches_;
  uint64_t collective_sequence_ = 0;
  std::vector<uint64_t> send_sequence_;
  std::vector<uint64_t> recv_sequence_;
  CoarseClock::time_point last_health_check_{};
  uint64_t ops_completed_[BAGUA_OPKIND_COUNT] = {};
  FlightRecorder recorder_;
  std::atomic<bool> trace_written_{false};  // the failure's dump is written once
  std::string trace_header(const std::string& reason) const;
  void note_waiting_of_active();  // engine mutex held
  uint64_t bytes_by_op_[BAGUA_OPKIND_COUNT] = {};

  void warm_up(Deadline deadline);      // comm_init.cc
  TransportCounters warm_up_counters_;  // traffic of warm_up() and setup operations, left out of the stats
  void progress_all();
  void check_health_throttled();
  void check_watchdog(Operation& op);
  void check_stranded_messages(const Operation& op);  // engine mutex held; throws INVALID_USAGE
  static constexpr uint64_t kStrandedWindow = 1024;   // sequence numbers behind a starting call that count as stale
  void fail_everything(bagua_status_t status, const std::string& message);
  void retire(Operation& op);  // counts a finished operation in the stats, then unwatch()
  void unwatch(Operation& op);

  std::atomic<uint64_t> compute_ns_{0};
  std::atomic<uint64_t> quantized_full_precision_{0};
  std::atomic<bool> abort_requested_{false};
  std::atomic<bagua_status_t> poison_status_{BAGUA_SUCCESS};
  mutable std::mutex mutex_;  // guards the strings below
  std::string poison_message_;
  std::string last_error_;
  std::string last_error_view_;  // stable copy handed to callers of last_error()
};

}  // namespace bagua

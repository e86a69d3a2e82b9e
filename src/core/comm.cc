#include "core/comm.h"

#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <new>
#include <thread>

#include <sched.h>

#include "base/backoff.h"
#include "base/logging.h"
#include "base/scratch_cache.h"
#include "bootstrap/root_server.h"
#include "topology/topology.h"
#include "transport/ucx/ucx_transport.h"

namespace bagua {

namespace {
// Slack past the timeout so that the root's report, which names the missing ranks, arrives first.
constexpr int kInitSlackMs = 800;

std::string read_root_file(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

// Connects to the root, reading BAGUA_ROOT_FILE again after each failed attempt (it may be stale).
Socket connect_root(const RootLocation& root, Deadline deadline, const std::atomic<bool>* stop) {
  if (root.root_file.empty()) return Socket::connect(root.address, deadline, stop);
  for (;;) {
    std::string text = read_root_file(root.root_file);
    if (!text.empty()) {
      try {
        return Socket::connect(SockAddr::parse(text), deadline.earlier(Deadline::after_ms(500)), stop);
      } catch (const Error& e) {
        if (e.status() == BAGUA_ERR_ABORTED) throw;
      }
    }
    if (deadline.expired())
      fail(BAGUA_ERR_TIMEOUT, "BAGUA_ROOT_FILE '{}' did not name a reachable rendezvous root within the timeout{}",
           root.root_file, text.empty() ? " (the file is missing or empty: is rank 0 running?)" : "");
    if (stop && stop->load()) fail(BAGUA_ERR_ABORTED, "aborted while waiting for the rendezvous root");
    usleep(50 * 1000);
  }
}
}  // namespace

RankInfo local_rank_info(const Socket& listener) {
  RankInfo info;
  info.host_id = detect_host_id();
  char hostname[256] = {0};
  gethostname(hostname, sizeof(hostname) - 1);
  info.hostname = hostname;
  info.pid = static_cast<uint32_t>(getpid());
  info.listen_addr = listener.local_address().str();
  return info;
}

std::unique_ptr<Comm> Comm::create(int nranks, int rank, const RootLocation& root, const Config& config) {
  set_log_rank(rank);
  Deadline deadline = Deadline::after_ms(static_cast<long long>(config.timeout_ms) + kInitSlackMs);
  std::atomic<bool> never(false);

  Socket root_sock = connect_root(root, deadline, &never);
  // Listen for the ring on the interface that reaches the root, unless BAGUA_SOCKET_IFNAME says otherwise.
  SockAddr listen_addr;
  if (const char* ifname = std::getenv("BAGUA_SOCKET_IFNAME"); ifname && *ifname)
    listen_addr = interface_address(ifname);
  else
    listen_addr = root_sock.local_address();
  listen_addr.set_port(0);
  Socket listener = Socket::listen(listen_addr);

  JoinRequest request;
  request.group_key = root.group_key;
  request.rank = rank;
  request.nranks = nranks;
  request.config_hash = config.agreement_hash();
  request.timeout_ms = config.timeout_ms;
  request.info = local_rank_info(listener);
  JobTable table = join_job(root_sock, root.secret, request, deadline, &never);
  root_sock.close();
  return form(rank, table, std::move(listener), root.secret, config, deadline);
}

std::unique_ptr<Comm> Comm::form(int rank, const JobTable& table, Socket listener, const Bytes& secret,
                                 const Config& config, Deadline deadline) {
  std::unique_ptr<Comm> comm(new Comm());
  int nranks = static_cast<int>(table.ranks.size());
  comm->rank_ = rank;
  comm->nranks_ = nranks;
  comm->config_ = config;
  comm->secret_ = secret;
  comm->listen_ip_ = listener.local_address();
  comm->listen_ip_.set_port(0);
  comm->comm_id_ = table.comm_id;
  comm->ranks_ = table.ranks;
  std::vector<std::string> host_ids;
  for (const RankInfo& info : table.ranks) host_ids.push_back(info.host_id);
  comm->placement_ = place_rank(host_ids, rank);
  for (int r = 0; r < nranks; ++r) comm->host_index_.push_back(place_rank(host_ids, r).host_index);
  comm->hosts_.assign(comm->placement_.nhosts, {});
  for (int r = 0; r < nranks; ++r) comm->hosts_[comm->host_index_[r]].push_back(r);
  for (const auto& host : comm->hosts_) comm->ring_order_.insert(comm->ring_order_.end(), host.begin(), host.end());

  comm->ring_ = BootstrapRing::connect(rank, table, std::move(listener), secret, deadline, &comm->abort_requested_);
  if (config.bind_numa) {
    int node = bind_to_numa_node(comm->placement_.local_rank);
    if (node >= 0) BAGUA_INFO("bound to NUMA node {} (BAGUA_BIND=1)", node);
  }

  // One UCX worker per communicator; worker addresses travel over the bootstrap ring.
  comm->transport_ = std::make_unique<UcxTransport>(rank, nranks, config.timeout_ms, config.single_copy_bytes);
  std::vector<Bytes> addresses = comm->ring_->allgather(comm->transport_->local_address(), deadline);
  comm->transport_->connect(addresses);
  // Single-copy transfers between ranks of a host, when every rank can read its host peers' memory.
  std::vector<bool> same_host(nranks);
  for (int r = 0; r < nranks; ++r) same_host[r] = r != rank && table.ranks[r].host_id == table.ranks[rank].host_id;
  std::vector<Bytes> probes = comm->ring_->allgather(comm->transport_->single_copy_probe_blob(), deadline);
  Bytes verdict = {static_cast<uint8_t>(comm->transport_->single_copy_probe(probes, same_host) ? 1 : 0)};
  bool everyone_can = true;
  for (const Bytes& v : comm->ring_->allgather(verdict, deadline)) everyone_can = everyone_can && v[0] == 1;
  if (everyone_can) comm->transport_->enable_single_copy(same_host);
  comm->cross_memory_ = everyone_can;
  BAGUA_DEBUG("single-copy transfers between host peers: {}", everyone_can ? "on" : "off");
  comm->send_sequence_.assign(nranks, 0);
  comm->recv_sequence_.assign(nranks, 0);
  if (Logger::instance().enabled(LogLevel::kDebug)) BAGUA_DEBUG("transport lanes:\n{}", comm->transport_->describe());
  BAGUA_INFO("communicator {:#x}{}: rank {} of {}, local rank {} of {} on host {} of {}", comm->comm_id_,
             config.comm_name.empty() ? "" : " (" + config.comm_name + ")", rank, nranks, comm->local_rank(),
             comm->local_size(), comm->placement_.host_index, comm->placement_.nhosts);
  return comm;
}

std::unique_ptr<Comm> Comm::split(int color, int key) {
  std::lock_guard<std::timed_mutex> lock(engine_mutex_);
  check_usable();
  if (!active_.empty())
    fail(BAGUA_ERR_INVALID_USAGE, "{} operation(s) still in flight: finish them (bagua_wait) before bagua_comm_split",
         active_.size());
  Deadline deadline = op_deadline();
  uint64_t split_index = split_count_++;
  try {
    // Everyone publishes (color, key) and, when it takes part, a fresh listener for the child's ring.
    Socket listener;
    Writer w;
    w.i32(color);
    w.i32(key);
    if (color != BAGUA_SPLIT_NOCOLOR) {
      listener = Socket::listen(listen_ip_);
      RankInfo info = local_rank_info(listener);
      w.str(info.host_id);
      w.str(info.hostname);
      w.u32(info.pid);
      w.str(info.listen_addr);
    }
    std::vector<Bytes> blobs = ring_->allgather(w.out(), deadline);
    if (color == BAGUA_SPLIT_NOCOLOR) return nullptr;
    struct Member {
      int key;
      int old_rank;
      RankInfo info;
    };
    std::vector<Member> members;
    for (int r = 0; r < nranks_; ++r) {
      Reader rd(blobs[r], "split announcement");
      int their_color = rd.i32();
      int their_key = rd.i32();
      if (their_color != color) continue;
      Member m{their_key, r, {}};
      m.info.host_id = rd.str(256);
      m.info.hostname = rd.str(256);
      m.info.pid = rd.u32();
      m.info.listen_addr = rd.str(256);
      members.push_back(std::move(m));
    }
    std::sort(members.begin(), members.end(), [](const Member& a, const Member& b) {
      return a.key != b.key ? a.key < b.key : a.old_rank < b.old_rank;
    });
    JobTable table;
    // Identical on every member: parent id, split ordinal and color.
    table.comm_id = (comm_id_ * 0x9e3779b97f4a7c15ull) ^ ((split_index + 1) * 0xbf58476d1ce4e5b9ull) ^
                    (static_cast<uint64_t>(static_cast<uint32_t>(color)) * 0x94d049bb133111ebull);
    int new_rank = -1;
    for (size_t i = 0; i < members.size(); ++i) {
      if (members[i].old_rank == rank_) new_rank = static_cast<int>(i);
      table.ranks.push_back(members[i].info);
    }
    Config child_config = config_;
    return form(new_rank, table, std::move(listener), secret_, child_config, deadline);
  } catch (const Error& e) {
    bagua_status_t status = abort_requested_.load() ? BAGUA_ERR_ABORTED : e.status();
    if (is_poisoning(status)) {
      fail_everything(status, e.what());
      check_usable();
    }
    throw;
  }
}

namespace {
std::atomic<int> g_live_comms{0};
}  // namespace

Comm::Comm() { ++g_live_comms; }

Comm::~Comm() {
  {
    std::lock_guard<std::timed_mutex> lock(engine_mutex_);
    bool healthy = !poisoned();
    for (Operation* op : active_) op->fail(BAGUA_ERR_ABORTED, "the communicator was destroyed");
    active_.clear();
    if (ring_ && healthy) ring_->say_goodbye();
    if (transport_) transport_->shutdown(healthy);
    if (ring_) ring_->shutdown();
  }
  if (--g_live_comms == 0) release_scratch_cache();  // no communicator left to reuse it
}

void Comm::check_usable() const {
  bagua_status_t status = poison_status_.load();
  if (status == BAGUA_SUCCESS) return;
  std::lock_guard<std::mutex> lock(mutex_);
  throw Error(status, fmt::format("communicator is unusable after an earlier error: {}", poison_message_));
}

void Comm::poison(bagua_status_t status, const std::string& message) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    bagua_status_t expected = BAGUA_SUCCESS;
    if (!poison_status_.compare_exchange_strong(expected, status)) return;
    poison_message_ = message;
  }
  BAGUA_WARN("communicator {:#x} failed: {}", comm_id_, message);
  // Tell the neighbours, who pass it on, so no rank waits for its full timeout on this one.
  if (ring_) ring_->notify_failure(status, message);
}

void Comm::fail_everything(bagua_status_t status, const std::string& message) {
  poison(status, message);
  for (Operation* op : active_) op->fail(poison_status_.load(), message);
  active_.clear();
  watches_.clear();
  // Nothing may write into user buffers once the error is reported.
  if (transport_) transport_->shutdown(false);
}

void Comm::abort() {
  abort_requested_.store(true);
  poison(BAGUA_ERR_ABORTED, "bagua_comm_abort was called");
  if (ring_) ring_->shutdown();
  // A blocked operation notices the flag within a poll slice and tears down itself; if none is running,
  // tear down here.
  std::unique_lock<std::timed_mutex> lock(engine_mutex_, std::defer_lock);
  if (lock.try_lock_for(std::chrono::milliseconds(1500)))
    fail_everything(BAGUA_ERR_ABORTED, "bagua_comm_abort was called");
}

void Comm::retire(Operation& op) {
  if (op.state() == Operation::State::kDone) {
    ++ops_completed_[op.kind()];
    bytes_by_op_[op.kind()] += op.bytes_sent();
  }
  unwatch(op);
}

void Comm::unwatch(Operation& op) {
  watches_.erase(std::remove_if(watches_.begin(), watches_.end(), [&](const auto& w) { return w.first == &op; }),
                 watches_.end());
}

void Comm::progress_all() {
  if (!transport_ || poisoned()) return;
  transport_->progress();
  for (size_t i = 0; i < active_.size(); ++i) {
    Operation* op = active_[i];
    try {
      op->advance(*transport_);
    } catch (const Error& e) {
      // Any failure after an operation has posted transfers leaves the ranks out of step and transfers
      // pointing at user memory: poison, which cancels and tears them down (argument errors never get here).
      fail_everything(abort_requested_.load() ? BAGUA_ERR_ABORTED : e.status(), e.what());
      return;
    } catch (const std::bad_alloc&) {  // e.g. scratch of a local step: same reasoning, a system error
      fail_everything(BAGUA_ERR_SYSTEM, fmt::format("{}: out of memory", op->description()));
      return;
    } catch (const std::exception& e) {
      fail_everything(BAGUA_ERR_INTERNAL, fmt::format("{}: internal error: {}", op->description(), e.what()));
      return;
    }
  }
  for (size_t i = 0; i < active_.size();) {
    if (active_[i]->running()) {
      ++i;
      continue;
    }
    retire(*active_[i]);
    active_.erase(active_.begin() + static_cast<long>(i));
  }
}

void Comm::check_health_throttled() {
  // One poll() per millisecond at most: the bootstrap ring reports a dead neighbour or a relayed failure.
  Clock::time_point now = Clock::now();
  if (now - last_health_check_ < std::chrono::milliseconds(1)) return;
  last_health_check_ = now;
  try {
    ring_->check_health();
  } catch (const Error& e) {
    fail_everything(abort_requested_.load() ? BAGUA_ERR_ABORTED : e.status(), e.what());
  }
}

void Comm::check_peers_now() {
  if (abort_requested_.load()) throw Error(BAGUA_ERR_ABORTED, "bagua_comm_abort was called");
  check_usable();
  ring_->check_health();
}

void Comm::check_watchdog(Operation& op) {
  for (auto& [watched, watch] : watches_) {
    if (watched != &op) continue;
    Clock::time_point now = Clock::now();
    if (op.events() != watch.events) {
      watch.events = op.events();
      watch.last_progress = now;
    } else if (now - watch.last_progress > std::chrono::milliseconds(config_.timeout_ms)) {
      fail_everything(BAGUA_ERR_TIMEOUT,
                      fmt::format("{} made no progress for {:.1f} s (BAGUA_TIMEOUT); waiting for: {}", op.description(),
                                  config_.timeout_ms / 1000.0, op.waiting_for()));
    }
    return;
  }
}

void Comm::start(Operation& op) {
  std::lock_guard<std::timed_mutex> lock(engine_mutex_);
  check_usable();
  active_.push_back(&op);
  watches_.push_back({&op, Watch{op.events(), Clock::now()}});
  progress_all();
}

bool Comm::test(Operation& op) {
  std::lock_guard<std::timed_mutex> lock(engine_mutex_);
  if (op.running()) {
    if (abort_requested_.load()) fail_everything(BAGUA_ERR_ABORTED, "bagua_comm_abort was called");
    progress_all();
    if (op.running()) check_health_throttled();
    if (op.running()) check_watchdog(op);
  }
  if (op.state() == Operation::State::kFailed) throw Error(op.status(), op.error());
  return op.state() == Operation::State::kDone;
}

void Comm::wait(Operation& op) {
  Backoff backoff;
  uint64_t last_events = op.events();
  while (!test(op)) {
    if (op.events() != last_events) {
      last_events = op.events();
      backoff.busy();
    } else {
      backoff.idle();
    }
  }
}

void Comm::forget(Operation& op) {
  std::lock_guard<std::timed_mutex> lock(engine_mutex_);
  active_.erase(std::remove(active_.begin(), active_.end(), &op), active_.end());
  unwatch(op);
}

bagua_status_t Comm::async_error() {
  std::lock_guard<std::timed_mutex> lock(engine_mutex_);
  if (!poisoned()) check_health_throttled();
  return poison_status_.load();
}

bagua_stats_t Comm::stats() const {
  bagua_stats_t out{};
  out.size = sizeof(out);
  if (transport_) {
    const TransportCounters& c = transport_->counters();
    out.bytes_sent = c.bytes_sent;
    out.bytes_received = c.bytes_received;
    out.messages_sent = c.messages_sent;
    out.messages_received = c.messages_received;
  }
  for (int k = 0; k < BAGUA_OPKIND_COUNT; ++k) {
    out.ops[k] = ops_completed_[k];
    out.bytes_sent_by_op[k] = bytes_by_op_[k];
  }
  out.compute_ns = compute_ns_.load(std::memory_order_relaxed);
  return out;
}

void Comm::set_last_error(const std::string& message) {
  std::lock_guard<std::mutex> lock(mutex_);
  last_error_ = message;
}

const char* Comm::last_error() {
  std::lock_guard<std::mutex> lock(mutex_);
  last_error_view_ = last_error_;
  return last_error_view_.c_str();
}

}  // namespace bagua

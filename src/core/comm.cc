#include "core/comm.h"

#include <unistd.h>

#include <fstream>
#include <thread>

#include "bootstrap/root_server.h"
#include "core/logging.h"

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

std::unique_ptr<Comm> Comm::create(int nranks, int rank, const RootLocation& root, const Config& config) {
  std::unique_ptr<Comm> comm(new Comm());
  comm->rank_ = rank;
  comm->nranks_ = nranks;
  comm->config_ = config;
  set_log_rank(rank);
  Deadline deadline = Deadline::after_ms(static_cast<long long>(config.timeout_ms) + kInitSlackMs);

  Socket root_sock = connect_root(root, deadline, &comm->abort_requested_);
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
  request.info.host_id = detect_host_id();
  char hostname[256] = {0};
  gethostname(hostname, sizeof(hostname) - 1);
  request.info.hostname = hostname;
  request.info.pid = static_cast<uint32_t>(getpid());
  request.info.listen_addr = listener.local_address().str();

  JobTable table = join_job(root_sock, root.secret, request, deadline, &comm->abort_requested_);
  root_sock.close();
  comm->comm_id_ = table.comm_id;
  comm->ranks_ = table.ranks;
  std::vector<std::string> host_ids;
  for (const RankInfo& info : table.ranks) host_ids.push_back(info.host_id);
  comm->placement_ = place_rank(host_ids, rank);

  comm->ring_ =
      BootstrapRing::connect(rank, table, std::move(listener), root.secret, deadline, &comm->abort_requested_);
  BAGUA_INFO("communicator {:#x}{}: rank {} of {}, local rank {} of {} on host {} of {}", comm->comm_id_,
             config.comm_name.empty() ? "" : " (" + config.comm_name + ")", rank, nranks, comm->local_rank(),
             comm->local_size(), comm->placement_.host_index, comm->placement_.nhosts);
  return comm;
}

Comm::~Comm() {
  if (ring_) {
    if (!poisoned()) ring_->say_goodbye();
    ring_->shutdown();
  }
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

void Comm::barrier() {
  run_op([&] { ring_->barrier(op_deadline()); });
}

void Comm::abort() {
  abort_requested_.store(true);
  poison(BAGUA_ERR_ABORTED, "bagua_comm_abort was called");
  if (ring_) ring_->shutdown();
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

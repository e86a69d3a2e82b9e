// extern "C" entry points for status, errors and communicator life cycle.
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>

#include "algorithms/dispatch.h"
#include "api/api_guard.h"
#include "api/op_helpers.h"
#include "base/env.h"
#include "base/logging.h"
#include "bootstrap/launch_env.h"
#include "bootstrap/root_server.h"
#include "bootstrap/unique_id.h"

namespace bagua {

namespace {
thread_local std::string t_last_error;

void warn_unauthenticated_once() {
  static std::atomic<bool> warned(false);
  if (!warned.exchange(true))
    BAGUA_WARN("BAGUA_SECRET is not set: the bootstrap runs unauthenticated (any local process could join)");
}

// Rank 0 serves the rendezvous itself when no launcher does (torchrun, mpirun, srun, plain variables).
void host_root_for_env(const LaunchInfo& info, const Config& config, RootLocation* root) {
  int idle_limit_ms = config.timeout_ms + 2000;
  if (!info.root_addr.empty()) {
    RootServer::start_detached(Socket::listen(root->address), info.secret, RootServer::Mode::kOneGroup, idle_limit_ms);
    return;
  }
  Socket listener = Socket::listen(choose_listen_address());
  std::string address = listener.local_address().str();
  std::string tmp = fmt::format("{}.{}.tmp", info.root_file, getpid());
  FILE* f = std::fopen(tmp.c_str(), "w");
  if (f == nullptr) fail_errno(errno, "cannot write BAGUA_ROOT_FILE " + tmp);
  std::fprintf(f, "%s\n", address.c_str());
  std::fclose(f);
  if (std::rename(tmp.c_str(), info.root_file.c_str()) != 0) fail_errno(errno, "cannot rename to " + info.root_file);
  RootServer::start_detached(std::move(listener), info.secret, RootServer::Mode::kOneGroup, idle_limit_ms);
}
}  // namespace

void record_error(bagua_comm* comm, const std::string& message) {
  t_last_error = message;
  if (comm && comm->impl) comm->impl->set_last_error(message);
  BAGUA_DEBUG("{}", message);
}

Comm& require_comm(bagua_comm* comm) {
  if (comm == nullptr || !comm->impl) fail(BAGUA_ERR_INVALID_ARGUMENT, "comm is NULL");
  return *comm->impl;
}

static void check_nranks_rank(int nranks, int rank) {
  if (nranks < 1 || nranks > kMaxRanks)
    fail(BAGUA_ERR_INVALID_ARGUMENT, "nranks {} is outside [1, {}]", nranks, kMaxRanks);
  if (rank < 0 || rank >= nranks) fail(BAGUA_ERR_INVALID_ARGUMENT, "rank {} is outside [0, {})", rank, nranks);
}

static bagua_status_t init_with_id(bagua_comm_t* out, int nranks, const bagua_unique_id_t& id, int rank,
                                   const bagua_config_t* user_config, const char* function) {
  return guarded(nullptr, function, [&] {
    require_pointer(out, "comm");
    check_nranks_rank(nranks, rank);
    Config config = Config::from_user(user_config);
    UniqueId uid = UniqueId::decode(id);
    RootLocation root{uid.root, {}, uid.secret, uid.group_key};
    check_algorithm_rules(config);  // a bad BAGUA_ALGO fails here, before the rendezvous
    auto handle = std::make_unique<bagua_comm>();
    handle->impl = Comm::create(nranks, rank, root, config);
    prepare_selection(*handle->impl);
    *out = handle.release();
  });
}

}  // namespace bagua

using namespace bagua;

extern "C" {

const char* bagua_status_string(bagua_status_t status) { return status_text(status); }

const char* bagua_get_last_error(bagua_comm_t comm) {
  if (comm != nullptr && comm->impl) return comm->impl->last_error();
  return t_last_error.c_str();
}

int bagua_get_version(void) { return BAGUA_VERSION_CODE; }

bagua_status_t bagua_get_unique_id(bagua_unique_id_t* id) {
  return guarded(nullptr, "bagua_get_unique_id", [&] {
    require_pointer(id, "id");
    create_unique_id_with_root().encode(id);
  });
}

bagua_status_t bagua_comm_init_rank(bagua_comm_t* comm, int nranks, bagua_unique_id_t id, int rank) {
  return init_with_id(comm, nranks, id, rank, nullptr, "bagua_comm_init_rank");
}

bagua_status_t bagua_comm_init_rank_config(bagua_comm_t* comm, int nranks, bagua_unique_id_t id, int rank,
                                           const bagua_config_t* config) {
  return init_with_id(comm, nranks, id, rank, config, "bagua_comm_init_rank_config");
}

bagua_status_t bagua_comm_init_from_env(bagua_comm_t* comm) {
  return guarded(nullptr, "bagua_comm_init_from_env", [&] {
    require_pointer(comm, "comm");
    LaunchInfo info = read_launch_env([](const char* name) { return env_get(name); });
    Config config = Config::from_env();
    check_algorithm_rules(config);  // a bad BAGUA_ALGO fails here, before the rendezvous
    RootLocation root;
    root.secret = info.secret;
    root.root_file = info.root_file;
    if (!info.root_addr.empty()) root.address = SockAddr::parse(info.root_addr);
    if (info.secret.empty()) warn_unauthenticated_once();
    // The k-th init_from_env of every process forms the k-th job at the root; a call refused above takes no number.
    static std::atomic<uint64_t> generation(0);
    root.group_key = ++generation;
    if (info.rank == 0 && !info.root_hosted_by_launcher) host_root_for_env(info, config, &root);
    auto handle = std::make_unique<bagua_comm>();
    handle->impl = Comm::create(info.nranks, info.rank, root, config);
    prepare_selection(*handle->impl);
    if (info.local_rank >= 0 && info.local_rank != handle->impl->local_rank())
      BAGUA_WARN("the launcher says local rank {}, the host layout gives {}; using {}", info.local_rank,
                 handle->impl->local_rank(), handle->impl->local_rank());
    *comm = handle.release();
  });
}

bagua_status_t bagua_comm_destroy(bagua_comm_t comm) {
  return guarded(nullptr, "bagua_comm_destroy", [&] {
    require_comm(comm);
    if (open_group_holds(comm))
      fail(BAGUA_ERR_INVALID_USAGE, "calls of this communicator wait in an open group: call bagua_group_end first");
    detach_open_requests(comm);
    delete comm;
  });
}

bagua_status_t bagua_comm_abort(bagua_comm_t comm) {
  return guarded(comm, "bagua_comm_abort", [&] { require_comm(comm).abort(); });
}

bagua_status_t bagua_comm_split(bagua_comm_t comm, int color, int key, bagua_comm_t* newcomm) {
  return guarded(comm, "bagua_comm_split", [&] {
    Comm& c = require_comm(comm);
    require_pointer(newcomm, "newcomm");
    if (color < 0 && color != BAGUA_SPLIT_NOCOLOR)
      fail(BAGUA_ERR_INVALID_ARGUMENT, "color {} is negative (use BAGUA_SPLIT_NOCOLOR to opt out)", color);
    std::unique_ptr<Comm> child = c.split(color, key);
    if (!child) {
      *newcomm = nullptr;
      return;
    }
    auto handle = std::make_unique<bagua_comm>();
    handle->impl = std::move(child);
    prepare_selection(*handle->impl, &c);
    *newcomm = handle.release();
  });
}

bagua_status_t bagua_comm_shrink(bagua_comm_t comm, bagua_comm_t* newcomm) {
  return guarded(comm, "bagua_comm_shrink", [&] {
    Comm& c = require_comm(comm);
    require_pointer(newcomm, "newcomm");
    auto handle = std::make_unique<bagua_comm>();
    handle->impl = c.shrink();
    prepare_selection(*handle->impl);
    *newcomm = handle.release();
  });
}

bagua_status_t bagua_comm_rank(bagua_comm_t comm, int* rank) {
  return guarded(comm, "bagua_comm_rank", [&] {
    Comm& c = require_comm(comm);
    require_pointer(rank, "rank");
    *rank = c.rank();
  });
}

bagua_status_t bagua_comm_size(bagua_comm_t comm, int* size) {
  return guarded(comm, "bagua_comm_size", [&] {
    Comm& c = require_comm(comm);
    require_pointer(size, "size");
    *size = c.size();
  });
}

bagua_status_t bagua_comm_local_rank(bagua_comm_t comm, int* local_rank) {
  return guarded(comm, "bagua_comm_local_rank", [&] {
    Comm& c = require_comm(comm);
    require_pointer(local_rank, "local_rank");
    *local_rank = c.local_rank();
  });
}

bagua_status_t bagua_comm_local_size(bagua_comm_t comm, int* local_size) {
  return guarded(comm, "bagua_comm_local_size", [&] {
    Comm& c = require_comm(comm);
    require_pointer(local_size, "local_size");
    *local_size = c.local_size();
  });
}

}  // extern "C"

#include "transport/ucx/ucx_transport.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "core/deadline.h"
#include "core/error.h"
#include "core/logging.h"

namespace bagua {

namespace {
constexpr int kCloseTimeoutMs = 1000;

// Sets a UCX variable in `config` unless the user set it in the environment (UCX_<name>).
void default_ucx_setting(ucp_config_t* config, const char* name, const std::string& value) {
  std::string env_name = std::string("UCX_") + name;
  if (std::getenv(env_name.c_str()) != nullptr) return;
  ucs_status_t status = ucp_config_modify(config, name, value.c_str());
  if (status != UCS_OK)
    BAGUA_WARN("could not set UCX_{}={}: {}", name, value, ucs_status_string(status));
}

bool shared_memory_allowed() {
  const char* tls = std::getenv("UCX_TLS");
  if (tls == nullptr || *tls == '\0' || tls[0] == '^') return true;  // all, or all but an exclusion list
  std::string list = tls;
  for (const char* name : {"all", "sm", "shm", "mm", "sysv", "posix"}) {
    size_t at = 0;
    while ((at = list.find(name, at)) != std::string::npos) {
      bool starts = at == 0 || list[at - 1] == ',';
      size_t end = at + std::strlen(name);
      if (starts && (end == list.size() || list[end] == ',')) return true;
      at = end;
    }
  }
  return false;
}

void on_endpoint_error(void* arg, ucp_ep_h, ucs_status_t status) {
  auto* peer = static_cast<UcxTransport::PeerState*>(arg);
  if (peer->status == UCS_OK) peer->status = status;
  BAGUA_DEBUG("UCX endpoint to rank {} failed: {}", peer->rank, ucs_status_string(status));
}

[[noreturn]] void fail_ucx(ucs_status_t status, const std::string& what) {
  fail(BAGUA_ERR_SYSTEM, "{}: {}", what, ucs_status_string(status));
}
}  // namespace

UcxTransport::UcxTransport(int rank, int nranks, int timeout_ms) : rank_(rank), nranks_(nranks) {
  ucp_config_t* config = nullptr;
  ucs_status_t status = ucp_config_read(nullptr, nullptr, &config);
  if (status != UCS_OK) fail_ucx(status, "ucp_config_read");
  // Peer error handling normally drops shared memory; MM_ERROR_HANDLING keeps it (DESIGN.md). UCX warns
  // about the setting when UCX_TLS leaves out every shared-memory transport, so only set it when one is in.
  if (shared_memory_allowed()) default_ucx_setting(config, "MM_ERROR_HANDLING", "y");
  // UCX's 20 s keepalive is far longer than our timeouts.
  default_ucx_setting(config, "KEEPALIVE_INTERVAL", std::to_string(std::max(timeout_ms / 3, 100)) + "ms");

  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_NAME;
  params.features = UCP_FEATURE_TAG;
  params.name = "bagua";
  status = ucp_init(&params, config, &context_);
  ucp_config_release(config);
  if (status != UCS_OK) fail_ucx(status, "ucp_init");

  ucp_worker_params_t worker_params{};
  worker_params.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  // MULTI: bagua_comm_abort may run on another thread while an operation progresses the worker.
  worker_params.thread_mode = UCS_THREAD_MODE_MULTI;
  status = ucp_worker_create(context_, &worker_params, &worker_);
  if (status != UCS_OK) {
    ucp_cleanup(context_);
    context_ = nullptr;
    fail_ucx(status, "ucp_worker_create");
  }
}

UcxTransport::~UcxTransport() { shutdown(false); }

Bytes UcxTransport::local_address() {
  ucp_address_t* address = nullptr;
  size_t length = 0;
  ucs_status_t status = ucp_worker_get_address(worker_, &address, &length);
  if (status != UCS_OK) fail_ucx(status, "ucp_worker_get_address");
  const auto* bytes = reinterpret_cast<const uint8_t*>(address);
  Bytes out(bytes, bytes + length);
  ucp_worker_release_address(worker_, address);
  return out;
}

void UcxTransport::connect(const std::vector<Bytes>& addresses) {
  endpoints_.assign(nranks_, nullptr);
  for (int peer = 0; peer < nranks_; ++peer) {
    auto state = std::make_unique<PeerState>();
    state->owner = this;
    state->rank = peer;
    ucp_ep_params_t params{};
    params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                        UCP_EP_PARAM_FIELD_ERR_HANDLER;
    params.address = reinterpret_cast<const ucp_address_t*>(addresses[peer].data());
    params.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    params.err_handler.cb = on_endpoint_error;
    params.err_handler.arg = state.get();
    ucs_status_t status = ucp_ep_create(worker_, &params, &endpoints_[peer]);
    if (status != UCS_OK) fail(BAGUA_ERR_REMOTE, "cannot create a UCX endpoint to rank {}: {}", peer, ucs_status_string(status));
    peers_.push_back(std::move(state));
  }
}

void UcxTransport::post_send(Transfer& transfer, int peer, uint64_t tag, const void* data, size_t bytes) {
  if (shut_down_) fail(BAGUA_ERR_INTERNAL, "send on a transport that was shut down");
  transfer = Transfer{};
  transfer.is_send = true;
  transfer.peer = peer;
  transfer.tag = tag;
  transfer.bytes = bytes;
  ucp_request_param_t param{};
  ucs_status_ptr_t request = ucp_tag_send_nbx(endpoints_[peer], data, bytes, tag, &param);
  ++counters_.messages_sent;
  counters_.bytes_sent += bytes;
  if (request == nullptr) {
    transfer.state = Transfer::State::kDone;
  } else if (UCS_PTR_IS_ERR(request)) {
    finish(transfer, UCS_PTR_STATUS(request), 0);
  } else {
    transfer.state = Transfer::State::kPending;
    transfer.handle = request;
    pending_.insert(&transfer);
  }
}

void UcxTransport::post_recv(Transfer& transfer, int peer, uint64_t tag, void* data, size_t bytes) {
  if (shut_down_) fail(BAGUA_ERR_INTERNAL, "receive on a transport that was shut down");
  transfer = Transfer{};
  transfer.is_send = false;
  transfer.peer = peer;
  transfer.tag = tag;
  transfer.bytes = bytes;
  ucp_request_param_t param{};
  // Always a request: UCX 1.13 does not fill recv_info on immediate completion, and we need the length.
  param.op_attr_mask = UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
  ucs_status_ptr_t request = ucp_tag_recv_nbx(worker_, data, bytes, tag, ~uint64_t(0), &param);
  if (request == nullptr) {
    finish(transfer, UCS_ERR_NO_MESSAGE, 0);
  } else if (UCS_PTR_IS_ERR(request)) {
    finish(transfer, UCS_PTR_STATUS(request), 0);
  } else {
    transfer.state = Transfer::State::kPending;
    transfer.handle = request;
    pending_.insert(&transfer);
  }
}

void UcxTransport::finish(Transfer& transfer, ucs_status_t status, size_t received_length) {
  if (transfer.handle != nullptr) {
    ucp_request_free(transfer.handle);
    transfer.handle = nullptr;
    pending_.erase(&transfer);
  }
  if (status == UCS_OK && !transfer.is_send && received_length != transfer.bytes) {
    transfer.state = Transfer::State::kFailed;
    transfer.failure = BAGUA_ERR_INVALID_USAGE;
    transfer.error = fmt::format("rank {} sent {} bytes where this rank expected {} (count or datatype mismatch?)",
                                 transfer.peer, received_length, transfer.bytes);
    return;
  }
  if (status == UCS_OK) {
    transfer.state = Transfer::State::kDone;
    if (!transfer.is_send) {
      ++counters_.messages_received;
      counters_.bytes_received += received_length;
    }
    return;
  }
  transfer.state = Transfer::State::kFailed;
  transfer.failure = status == UCS_ERR_MESSAGE_TRUNCATED ? BAGUA_ERR_INVALID_USAGE
                     : status == UCS_ERR_CANCELED        ? BAGUA_ERR_ABORTED
                                                         : BAGUA_ERR_REMOTE;
  if (status == UCS_ERR_MESSAGE_TRUNCATED)
    transfer.error = fmt::format("rank {} sent more than the {} bytes this rank expected (count or datatype mismatch?)",
                                 transfer.peer, transfer.bytes);
  else if (status == UCS_ERR_CANCELED)
    transfer.error = "cancelled";
  else
    transfer.error = fmt::format("{} rank {} failed: {}", transfer.is_send ? "send to" : "receive from", transfer.peer,
                                 ucs_status_string(status));
}

void UcxTransport::check(Transfer& transfer) {
  if (transfer.state != Transfer::State::kPending) return;
  if (transfer.is_send) {
    ucs_status_t status = ucp_request_check_status(transfer.handle);
    if (status != UCS_INPROGRESS) finish(transfer, status, transfer.bytes);
  } else {
    ucp_tag_recv_info_t info{};
    ucs_status_t status = ucp_tag_recv_request_test(transfer.handle, &info);
    if (status != UCS_INPROGRESS) finish(transfer, status, info.length);
  }
  // A receive has no endpoint, so UCX cannot fail it when the sender dies: do it here.
  if (transfer.state == Transfer::State::kPending && peers_[transfer.peer]->status != UCS_OK) {
    ucs_status_t peer_status = peers_[transfer.peer]->status;
    ucp_request_cancel(worker_, transfer.handle);
    finish(transfer, peer_status, 0);
  }
}

unsigned UcxTransport::progress() {
  if (shut_down_) return 0;
  return ucp_worker_progress(worker_);
}

std::string UcxTransport::peer_failure(int peer) const {
  if (peer < 0 || peer >= static_cast<int>(peers_.size()) || peers_[peer]->status == UCS_OK) return {};
  return ucs_status_string(peers_[peer]->status);
}

void UcxTransport::close_endpoints(bool graceful) {
  std::vector<ucs_status_ptr_t> closing;
  for (int peer = 0; peer < static_cast<int>(endpoints_.size()); ++peer) {
    if (endpoints_[peer] == nullptr) continue;
    ucp_request_param_t param{};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    bool force = !graceful || peers_[peer]->status != UCS_OK;
    param.flags = force ? UCP_EP_CLOSE_FLAG_FORCE : 0;
    ucs_status_ptr_t request = ucp_ep_close_nbx(endpoints_[peer], &param);
    if (request != nullptr && !UCS_PTR_IS_ERR(request)) closing.push_back(request);
    endpoints_[peer] = nullptr;
  }
  // Bounded: a dead peer never acknowledges a flush.
  Deadline deadline = Deadline::after_ms(kCloseTimeoutMs);
  for (ucs_status_ptr_t request : closing) {
    while (ucp_request_check_status(request) == UCS_INPROGRESS && !deadline.expired()) ucp_worker_progress(worker_);
    if (ucp_request_check_status(request) != UCS_INPROGRESS) ucp_request_free(request);
  }
}

void UcxTransport::shutdown(bool graceful) {
  if (shut_down_ || worker_ == nullptr) {
    shut_down_ = true;
    return;
  }
  // Cancel what is pending so that nothing lands in user memory after we return. Receives are cancelled
  // directly; a forced endpoint close completes the sends on it (a dead peer would never acknowledge them).
  for (Transfer* transfer : std::vector<Transfer*>(pending_.begin(), pending_.end()))
    if (!transfer->is_send) ucp_request_cancel(worker_, transfer->handle);
  if (!graceful) close_endpoints(false);
  Deadline deadline = Deadline::after_ms(kCloseTimeoutMs);
  while (!pending_.empty() && !deadline.expired()) {
    ucp_worker_progress(worker_);
    for (Transfer* transfer : std::vector<Transfer*>(pending_.begin(), pending_.end())) check(*transfer);
  }
  for (Transfer* transfer : std::vector<Transfer*>(pending_.begin(), pending_.end())) {
    // Still not released by UCX: forget it; the worker's destruction below frees it.
    transfer->state = Transfer::State::kFailed;
    transfer->failure = BAGUA_ERR_ABORTED;
    transfer->error = "cancelled";
    transfer->handle = nullptr;
  }
  pending_.clear();
  if (graceful) close_endpoints(true);
  ucp_worker_destroy(worker_);
  worker_ = nullptr;
  ucp_cleanup(context_);
  context_ = nullptr;
  shut_down_ = true;
}

std::string UcxTransport::describe() const {
  if (worker_ == nullptr) return "UCX transport (shut down)";
  char* text = nullptr;
  size_t size = 0;
  FILE* stream = open_memstream(&text, &size);
  if (stream == nullptr) return "UCX transport";
  for (int peer = 0; peer < static_cast<int>(endpoints_.size()); ++peer) {
    if (endpoints_[peer] == nullptr || peer == rank_) continue;
    std::fprintf(stream, "# endpoint to rank %d\n", peer);
    ucp_ep_print_info(endpoints_[peer], stream);
  }
  std::fclose(stream);
  std::string out(text, size);
  std::free(text);
  return out;
}

}  // namespace bagua

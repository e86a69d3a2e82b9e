#include "transport/ucx/ucx_transport.h"

#include <sys/uio.h>
#include <unistd.h>
#include <cstdio>
#include <cstdlib>

#include <cerrno>
#include <cstring>

#include "base/deadline.h"
#include "base/env.h"
#include "base/error.h"
#include "base/logging.h"
#include "base/process_identity.h"
#include "transport/cross_memory.h"
#include "transport/ucx/ucx_text.h"

namespace bagua {

namespace {
constexpr int kCloseTimeoutMs = 1000;

// Sets a UCX variable in `config` unless the user set it in the environment (UCX_<name>, or env_name when the
// environment spells it with a transport's prefix that ucp_config_modify does not take).
void default_ucx_setting(ucp_config_t* config, const char* name, const std::string& value,
                         const char* env_name = nullptr) {
  std::string variable = env_name ? env_name : std::string("UCX_") + name;
  if (env_get(variable.c_str()) != nullptr) return;
  ucs_status_t status = ucp_config_modify(config, name, value.c_str());
  if (status != UCS_OK) BAGUA_WARN("could not set {}={}: {}", variable, value, ucs_status_string(status));
}

// UCX_TLS as UCX will use it: from the environment, else from a ucx.conf file (UCX 1.13 reads
// <sysconfdir>/ucx/ucx.conf, <libdir>/../etc/ucx.conf, then ucx.conf in $HOME, $UCX_CONFIG_DIR and the working
// directory), else "all". The environment's is taken as set: UCX prints a value through a 128-byte buffer.
std::string configured_tls(const ucp_config_t* config) {
  if (const char* tls = env_get("UCX_TLS")) return tls;
  char* text = nullptr;
  size_t size = 0;
  std::FILE* stream = open_memstream(&text, &size);
  if (stream == nullptr) return "";
  ucp_config_print(config, stream, nullptr, UCS_CONFIG_PRINT_CONFIG);
  std::fclose(stream);
  std::string tls = ucx_config_value(std::string(text, size), "UCX_TLS");
  std::free(text);
  return tls;
}

void on_endpoint_error(void* arg, ucp_ep_h, ucs_status_t status) {
  auto* peer = static_cast<UcxTransport::PeerState*>(arg);
  ucs_status_t ok = UCS_OK;
  peer->status.compare_exchange_strong(ok, status);  // (the first failure stays; any progressing thread)
  BAGUA_DEBUG("UCX endpoint to rank {} failed: {}", peer->rank, ucs_status_string(status));
}

}  // namespace

namespace {

[[noreturn]] void fail_ucx(ucs_status_t status, const std::string& what) {
  fail(BAGUA_ERR_SYSTEM, "{}: {}", what, ucs_status_string(status));
}
}  // namespace

UcxTransport::UcxTransport(int rank, int nranks, int timeout_ms, size_t single_copy_bytes,
                           bool host_peers_in_other_pid_namespaces)
    : rank_(rank), nranks_(nranks), single_copy_bytes_(single_copy_bytes), shared_before_(shared_mappings()) {
  ucp_config_t* read = nullptr;
  ucs_status_t status = ucp_config_read(nullptr, nullptr, &read);
  if (status != UCS_OK) fail_ucx(status, "ucp_config_read");
  std::unique_ptr<ucp_config_t, void (*)(ucp_config_t*)> owned(read, ucp_config_release);
  ucp_config_t* config = owned.get();
  // Peer error handling normally drops shared memory; MM_ERROR_HANDLING keeps it (docs/transport.md). UCX warns
  // about the setting when UCX_TLS leaves out every shared-memory transport, so only set it when one is in.
  const std::string configured = configured_tls(config);
  const char* tls = configured.c_str();
  if (ucx_tls_allows(tls, {"posix", "sysv", "xpmem"}, {"mm", "sm", "shm"}))
    default_ucx_setting(config, "MM_ERROR_HANDLING", "y");
  // Likewise the TCP settings below, where UCX_TLS leaves TCP out (UCX_TLS=sm warned "invalid configuration").
  const bool tcp = ucx_tls_allows(tls, {"tcp"});
  // UCX's 20 s keepalive is far longer than our timeouts.
  default_ucx_setting(config, "KEEPALIVE_INTERVAL", std::to_string(std::max(timeout_ms / 3, 100)) + "ms");
  // UCX 1.13 connects its TCP endpoints with a blocking connect() inside ucp_ep_create: to a host that drops
  // packets (a cut link) that blocks for the kernel's SYN retries, about 127 s, past every deadline.
  // (ucp_config_modify takes the TCP transport's field without its prefix; "TCP_CONN_NB" matched nothing.)
  if (tcp) default_ucx_setting(config, "CONN_NB", "y", "UCX_TCP_CONN_NB");
  // A TCP flow parks up to its send buffer in the sender's egress queue, and a rendezvous reply to a peer waits
  // behind it: with the kernel's autotuned buffers (MBs) each round of a ring between hosts lost 1-2 ms at 1 Gbit/s
  // (docs/transport.md, "TCP send buffers"). 128K, which the kernel doubles, keeps that queue under 2 ms there.
  if (tcp) default_ucx_setting(config, "SNDBUF", "128K", "UCX_TCP_SNDBUF");
  // UCX 1.13's sysv transport fails to connect processes in different PID namespaces (an endpoint timeout at init).
  // A list the user chose, in the environment or a ucx.conf file, stays; "all" (set or not) includes sysv.
  const bool tls_chosen = !configured.empty() && configured != "all";
  if (host_peers_in_other_pid_namespaces && !tls_chosen) {
    status = ucp_config_modify(config, "TLS", "^sysv");
    if (status != UCS_OK) BAGUA_WARN("could not set UCX_TLS=^sysv: {}", ucs_status_string(status));
  }
  // The eager limit of SendMode::kEager sends (UCX applies it while RNDV_THRESH is auto).
  default_ucx_setting(config, "RNDV_SEND_NBR_THRESH", std::to_string(kEagerMostBytes));

  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_NAME;
  params.features = UCP_FEATURE_TAG;
  params.name = "bagua";
  status = ucp_init(&params, config, &context_);
  owned.reset();
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
  // A UCX built without thread support (configure's --enable-mt) gives a single-threaded worker whatever was asked.
  ucp_worker_attr_t attr{};
  attr.field_mask = UCP_WORKER_ATTR_FIELD_THREAD_MODE;
  thread_safe_ = ucp_worker_query(worker_, &attr) == UCS_OK && attr.thread_mode == UCS_THREAD_MODE_MULTI;
  if (!thread_safe_) BAGUA_DEBUG("this UCX gives single-threaded workers (built without --enable-mt)");
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
    params.field_mask =
        UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER;
    params.address = reinterpret_cast<const ucp_address_t*>(addresses[peer].data());
    params.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    params.err_handler.cb = on_endpoint_error;
    params.err_handler.arg = state.get();
    ucs_status_t status = ucp_ep_create(worker_, &params, &endpoints_[peer]);
    if (status != UCS_OK)
      fail(BAGUA_ERR_REMOTE, "cannot create a UCX endpoint to rank {}: {}", peer, ucs_status_string(status));
    peers_.push_back(std::move(state));
  }
}

namespace {
constexpr uint32_t kSingleCopyMagic = 0x414d4342;  // "BCMA"
// magic u32 | pid u32 | address u64 | bytes u64 | acknowledgement id u32 | sender rank u32
constexpr size_t kHeaderBytes = 32;
constexpr size_t kAckBytes = 8;
constexpr uint64_t kAckKind = 15;
// Receive stage of a message that may come as data or as a single-copy header (stage 1 once it is a header).
constexpr int kDataOrHeader = 3;

bool is_single_copy_header(const void* message, size_t length) {
  uint32_t magic = 0;
  if (length != kHeaderBytes) return false;
  std::memcpy(&magic, message, sizeof magic);
  return magic == kSingleCopyMagic;
}

// The acknowledgement goes back to the sender on a tag only that send waits for: the sender's rank and an id
// unique among its transfers (the data tag alone is not unique across destinations). Its top two bits (the tag
// space of core/tags.h) are 3, which no operation uses.
uint64_t ack_tag(uint32_t sender, uint32_t id) {
  return (kAckKind << 60) | (static_cast<uint64_t>(sender & 0xfffffu) << 32) | id;
}
}  // namespace

void* UcxTransport::ucx_send(int peer, uint64_t tag, const void* data, size_t bytes, ucs_status_t* status,
                             SendMode mode) {
  if (closing_ || endpoints_[peer] == nullptr) {  // shutting down: no new messages
    *status = UCS_ERR_CANCELED;
    return nullptr;
  }
  ucp_request_param_t param{};
  // Fast local completion: UCX then sends eagerly up to RNDV_SEND_NBR_THRESH (set to kEagerMostBytes).
  if (mode != SendMode::kDefault) param.op_attr_mask |= UCP_OP_ATTR_FLAG_FAST_CMPL;
  ucs_status_ptr_t request = ucp_tag_send_nbx(endpoints_[peer], data, bytes, tag, &param);
  *status = UCS_PTR_IS_ERR(request) ? UCS_PTR_STATUS(request) : UCS_OK;
  return UCS_PTR_IS_PTR(request) ? request : nullptr;
}

void* UcxTransport::ucx_recv(uint64_t tag, void* data, size_t bytes, ucs_status_t* status, uint64_t unmatched_bits) {
  if (closing_) {
    *status = UCS_ERR_CANCELED;
    return nullptr;
  }
  ucp_request_param_t param{};
  // Always a request: UCX 1.13 does not fill recv_info on immediate completion, and we need the length.
  param.op_attr_mask = UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
  ucs_status_ptr_t request = ucp_tag_recv_nbx(worker_, data, bytes, tag, ~unmatched_bits, &param);
  *status = UCS_PTR_IS_ERR(request) ? UCS_PTR_STATUS(request) : (request == nullptr ? UCS_ERR_NO_MESSAGE : UCS_OK);
  return UCS_PTR_IS_PTR(request) ? request : nullptr;
}

// UCS_INPROGRESS, or the final status (the request is then freed and *handle cleared).
ucs_status_t UcxTransport::poll_request(void** handle, bool is_recv, size_t* length, uint64_t* sender_tag) {
  if (*handle == nullptr) return UCS_OK;
  ucs_status_t status;
  if (is_recv) {
    ucp_tag_recv_info_t info{};
    status = ucp_tag_recv_request_test(*handle, &info);
    if (length) *length = info.length;
    if (sender_tag) *sender_tag = info.sender_tag;
  } else {
    status = ucp_request_check_status(*handle);
  }
  if (status == UCS_INPROGRESS) return status;
  ucp_request_free(*handle);
  *handle = nullptr;
  return status;
}

bool UcxTransport::single_copy_peer(int peer) const {
  return peer != rank_ && peer < static_cast<int>(single_copy_peers_.size()) && single_copy_peers_[peer];
}

void UcxTransport::start(Transfer& transfer, bool is_send, int peer, uint64_t tag, size_t bytes) {
  if (shut_down_) fail(BAGUA_ERR_INTERNAL, "transfer on a transport that was shut down");
  transfer = Transfer{};  // keeps its place in the list of transfers in flight, if any (a failed receive's ack)
  transfer.is_send = is_send;
  transfer.peer = peer;
  transfer.tag = tag;
  transfer.bytes = bytes;
  transfer.state = Transfer::State::kPending;
}

void UcxTransport::post_send(Transfer& transfer, int peer, uint64_t tag, const void* data, size_t bytes,
                             SendMode mode) {
  start(transfer, true, peer, tag, bytes);
  ++counters_.messages_sent;
  counters_.bytes_sent += bytes;
  ucs_status_t status;
  const size_t single_copy_from = mode == SendMode::kEager ? always_single_copy_bytes() : single_copy_bytes_;
  if (bytes >= single_copy_from && single_copy_peer(peer)) {
    // Rendezvous: tell the receiver where the data is; it reads it directly and acknowledges.
    uint32_t id = next_ack_id_++;
    uint8_t* header = transfer.control;  // written in place: no allocation per send
    auto put = [&header](uint64_t v, int n) {
      for (int i = 0; i < n; ++i) *header++ = static_cast<uint8_t>(v >> (8 * i));  // little-endian, as Writer
    };
    put(kSingleCopyMagic, 4);
    put(pid_, 4);
    put(reinterpret_cast<uintptr_t>(data), 8);
    put(bytes, 8);
    put(id, 4);
    put(static_cast<uint32_t>(rank_), 4);
    transfer.stage = 1;
    transfer.aux =
        ucx_recv(ack_tag(static_cast<uint32_t>(rank_), id), transfer.control + kHeaderBytes, kAckBytes, &status);
    if (status == UCS_OK) transfer.handle = ucx_send(peer, tag, transfer.control, kHeaderBytes, &status);
  } else {
    transfer.handle = ucx_send(peer, tag, data, bytes, &status, mode);
  }
  if (status != UCS_OK) return finish(transfer, status, 0);
  if (transfer.handle == nullptr && transfer.aux == nullptr) return finish(transfer, UCS_OK, bytes);
  pending_.insert(&transfer);
}

void UcxTransport::post_recv(Transfer& transfer, int peer, uint64_t tag, void* data, size_t bytes,
                             uint64_t unmatched_bits) {
  start(transfer, false, peer, tag, bytes);
  transfer.user_data = data;
  transfer.unmatched_bits = unmatched_bits;
  ucs_status_t status;
  if (bytes >= always_single_copy_bytes() && single_copy_peer(peer)) {
    transfer.stage = 1;
    transfer.handle = ucx_recv(tag, transfer.control, kHeaderBytes, &status, unmatched_bits);
  } else if (bytes >= single_copy_bytes_ && single_copy_peer(peer)) {
    // The sender's mode decides: the data itself, or a single-copy header (check() tells them apart).
    transfer.stage = kDataOrHeader;
    transfer.handle = ucx_recv(tag, data, bytes, &status, unmatched_bits);
  } else {
    transfer.handle = ucx_recv(tag, data, bytes, &status, unmatched_bits);
  }
  if (status != UCS_OK) return finish(transfer, status, 0);
  pending_.insert(&transfer);
}

void UcxTransport::finish(Transfer& transfer, ucs_status_t status, size_t received_length) {
  for (void** handle : {&transfer.handle, &transfer.aux}) {
    if (*handle == nullptr) continue;
    ucp_request_cancel(worker_, *handle);  // no effect on a send: give it a bounded time to finish
    Deadline deadline = Deadline::after_ms(kCloseTimeoutMs);
    while (ucp_request_check_status(*handle) == UCS_INPROGRESS && !deadline.expired()) ucp_worker_progress(worker_);
    if (ucp_request_check_status(*handle) != UCS_INPROGRESS) ucp_request_free(*handle);  // else the worker frees it
    *handle = nullptr;
  }
  pending_.erase(&transfer);
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

// Receiver, single copy: the header has arrived; read the data straight from the sender, then acknowledge.
void UcxTransport::read_single_copy(Transfer& transfer) {
  Reader r(transfer.control, kHeaderBytes, "single-copy header");
  uint32_t magic = r.u32();
  auto pid = static_cast<pid_t>(r.u32());
  uint64_t address = r.u64();
  uint64_t bytes = r.u64();
  uint32_t id = r.u32();
  uint32_t sender = r.u32();
  ucs_status_t ack_status;
  auto acknowledge = [&] {
    transfer.aux =
        ucx_send(transfer.peer, ack_tag(sender, id), transfer.control + kHeaderBytes, kAckBytes, &ack_status);
  };
  if (magic != kSingleCopyMagic || bytes != transfer.bytes) {
    acknowledge();  // release the sender either way
    return finish_mismatch(transfer, bytes);
  }
  std::string error = read_process_memory(pid, address, transfer.user_data, bytes);
  if (!error.empty()) {
    transfer.state = Transfer::State::kFailed;
    transfer.failure = BAGUA_ERR_REMOTE;
    transfer.error = fmt::format("reading {} bytes from rank {} failed: {}", bytes, transfer.peer, error);
    acknowledge();
    if (transfer.aux == nullptr) pending_.erase(&transfer);  // else shutdown or check() collects the ack
    return;
  }
  transfer.stage = 2;
  acknowledge();
  if (ack_status != UCS_OK) return finish(transfer, ack_status, 0);
  if (transfer.aux == nullptr) finish(transfer, UCS_OK, transfer.bytes);
}

void UcxTransport::finish_mismatch(Transfer& transfer, uint64_t sent_bytes) {
  transfer.state = Transfer::State::kFailed;
  transfer.failure = BAGUA_ERR_INVALID_USAGE;
  transfer.error = fmt::format("rank {} sent {} bytes where this rank expected {} (count or datatype mismatch?)",
                               transfer.peer, sent_bytes, transfer.bytes);
  if (transfer.aux == nullptr) pending_.erase(&transfer);
}

bool UcxTransport::fail_on_tag_mismatch(Transfer& transfer) {
  if (((transfer.sender_tag ^ transfer.tag) & transfer.unmatched_bits) == 0) return false;
  if (transfer.stage == 1 && !transfer.is_send) {  // a single-copy header: release the sender, read nothing
    Reader r(transfer.control, kHeaderBytes, "single-copy header");
    if (r.u32() == kSingleCopyMagic) {
      r.u32();
      r.u64();
      r.u64();
      uint32_t id = r.u32();
      uint32_t sender = r.u32();
      ucs_status_t ack_status;
      transfer.aux =
          ucx_send(transfer.peer, ack_tag(sender, id), transfer.control + kHeaderBytes, kAckBytes, &ack_status);
    }
  }
  transfer.state = Transfer::State::kFailed;
  transfer.failure = BAGUA_ERR_INVALID_USAGE;
  transfer.tag_mismatch = true;
  transfer.error = fmt::format("rank {} sent a message tagged {:#x} where this rank expected {:#x}", transfer.peer,
                               transfer.sender_tag, transfer.tag);
  if (transfer.aux == nullptr) pending_.erase(&transfer);  // else check() collects the acknowledgement
  return true;
}

bool UcxTransport::find_unmatched(uint64_t tag, uint64_t mask, uint64_t* sender_tag) {
  if (shut_down_ || worker_ == nullptr) return false;
  ucp_tag_recv_info_t info{};
  ucp_tag_message_h message = ucp_tag_probe_nb(worker_, tag, mask, 0, &info);
  if (message == nullptr) return false;
  *sender_tag = info.sender_tag;
  return true;
}

void UcxTransport::check(Transfer& transfer) {
  if (transfer.state != Transfer::State::kPending) {
    // A failed single-copy receive may still be sending its acknowledgement; let it finish quietly.
    if (transfer.aux != nullptr && poll_request(&transfer.aux, false, nullptr) != UCS_INPROGRESS)
      pending_.erase(&transfer);
    return;
  }
  size_t length = 0;
  if (transfer.is_send) {
    ucs_status_t header = poll_request(&transfer.handle, false, nullptr);
    ucs_status_t ack = poll_request(&transfer.aux, true, nullptr);
    if (header != UCS_OK && header != UCS_INPROGRESS) return finish(transfer, header, 0);
    if (ack != UCS_OK && ack != UCS_INPROGRESS) return finish(transfer, ack, 0);
    if (transfer.handle == nullptr && transfer.aux == nullptr) return finish(transfer, UCS_OK, transfer.bytes);
  } else if (transfer.stage == 2) {
    ucs_status_t ack = poll_request(&transfer.aux, false, nullptr);
    if (ack != UCS_INPROGRESS) return finish(transfer, ack, ack == UCS_OK ? transfer.bytes : 0);
  } else {
    ucs_status_t status = poll_request(&transfer.handle, true, &length, &transfer.sender_tag);
    if (status == UCS_OK && (transfer.stage == kDataOrHeader || transfer.stage == 0)) {
      // A header where data was expected: a single-copy send of this size (data of a size this large is never
      // header-sized: single copy starts at 1 KiB or more), or on a plain receive, of another size, which then
      // fails as a size mismatch but still releases its sender.
      if (transfer.bytes != kHeaderBytes && is_single_copy_header(transfer.user_data, length)) {
        std::memcpy(transfer.control, transfer.user_data, kHeaderBytes);
        transfer.stage = 1;
      } else {
        transfer.stage = 0;
      }
    }
    if (status != UCS_INPROGRESS) {
      if (status == UCS_OK && fail_on_tag_mismatch(transfer)) return;
      if (transfer.stage == 1 && status == UCS_OK) {
        if (length != kHeaderBytes) return finish(transfer, UCS_OK, length);  // a plain message: size mismatch
        if (closing_) return finish(transfer, UCS_ERR_CANCELED, 0);
        return read_single_copy(transfer);
      }
      return finish(transfer, status, length);
    }
  }
  // A receive has no endpoint, so UCX cannot fail it when the sender dies: do it here.
  if (transfer.state == Transfer::State::kPending && peers_[transfer.peer]->status != UCS_OK)
    finish(transfer, peers_[transfer.peer]->status, 0);
}

// A random word and where it lives, with the pid and its PID namespace: a pid names a process only within its
// namespace (in another, often this process itself, whose memory at that address must not pass for the peer's).
Bytes UcxTransport::single_copy_probe_blob() {
  probe_word_ = random_word() ^ reinterpret_cast<uintptr_t>(this);
  Writer w;
  w.u64(process_key());
  w.u64(reinterpret_cast<uintptr_t>(&probe_word_));
  w.u64(probe_word_);
  return std::move(w.out());
}

bool UcxTransport::single_copy_probe(const std::vector<Bytes>& blobs, const std::vector<bool>& same_host) {
  if (const char* off = env_get("BAGUA_CMA"); off && std::strcmp(off, "0") == 0) return false;
  for (int peer = 0; peer < static_cast<int>(blobs.size()); ++peer) {
    if (peer == rank_ || !same_host[peer]) continue;
    Reader r(blobs[peer], "probe");
    const uint64_t process = r.u64();
    uint64_t address = r.u64();
    uint64_t expected = r.u64();
    if (process >> 32 != process_key() >> 32) {
      BAGUA_DEBUG("no single copy: rank {} runs in another PID namespace", peer);
      return false;
    }
    const pid_t pid = pid_of_process_key(process);
    uint64_t value = 0;
    if (!read_process_memory(pid, address, &value, sizeof(value)).empty() || value != expected) return false;
    // The direct allreduce also writes into peers (the same permission check; the same value back).
    if (!write_process_memory(pid, address, &value, sizeof(value)).empty()) return false;
  }
  return true;
}

void UcxTransport::enable_single_copy(const std::vector<bool>& peers) { single_copy_peers_ = peers; }

bool ucx_prefault_range(const SharedMapping& m, const std::vector<SharedMapping>& before, uintptr_t* from) {
  const bool ucx = m.path.rfind("/SYSV", 0) == 0 || m.path.find("ucx_shm_posix") != std::string::npos;
  if (!ucx || std::find(before.begin(), before.end(), m) != before.end()) return false;
  *from = m.end - m.begin > kUcxPrefaultBytes ? m.end - kUcxPrefaultBytes : m.begin;
  return true;
}

// UCX's shared-memory transports (sysv, posix) give each receiver a pool of about 4 MiB of 8 KiB buffers, mapped by
// the receiver and by every sender to it, and fault its pages in lazily. Its allocator hands the buffers out from the
// end of the pool downwards, and a receiver that keeps a buffer for a message that arrived before its receive puts a
// fresh one in its FIFO. The warm-up reaches about 1 MiB below the end; the next fresh buffers lie just below
// (docs/transport.md, "Warm-up at init").
size_t UcxTransport::prefault_shared_memory() noexcept {
  try {
    size_t done = 0;
    uintptr_t from = 0;
    for (const SharedMapping& m : shared_mappings())
      if (ucx_prefault_range(m, shared_before_, &from) && prefault_pages(from, m.end)) done += m.end - from;
    return done;
  } catch (...) {  // out of memory reading the maps: a speed-up lost, nothing else
    return 0;
  }
}

unsigned UcxTransport::progress() {
  if (shut_down_) return 0;
  return ucp_worker_progress(worker_);
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
  // Bounded: a dead or unreachable peer never acknowledges a flush. A close still running is released all the same
  // (UCX finishes it with the worker); one never released aborts the process in ucp_worker_destroy (UCX 1.13).
  Deadline deadline = Deadline::after_ms(kCloseTimeoutMs);
  for (ucs_status_ptr_t request : closing) {
    while (ucp_request_check_status(request) == UCS_INPROGRESS && !deadline.expired()) ucp_worker_progress(worker_);
    ucp_request_free(request);
  }
}

// Messages no receive took (those of mismatched calls, or sent to a rank that failed first): received and dropped,
// so that UCX does not warn about each one when the worker goes.
void UcxTransport::discard_unmatched() {
  std::vector<uint8_t> sink;
  Deadline deadline = Deadline::after_ms(kCloseTimeoutMs);
  for (int n = 0; n < 4096 && !deadline.expired(); ++n) {
    ucp_tag_recv_info_t info{};
    ucp_tag_message_h message = ucp_tag_probe_nb(worker_, 0, 0, 1, &info);
    if (message == nullptr) return;
    sink.resize(std::max<size_t>(sink.size(), info.length));
    ucp_request_param_t param{};
    ucs_status_ptr_t request = ucp_tag_msg_recv_nbx(worker_, sink.data(), info.length, message, &param);
    if (UCS_PTR_IS_ERR(request)) return;
    if (request == nullptr) continue;
    while (ucp_request_check_status(request) == UCS_INPROGRESS && !deadline.expired()) ucp_worker_progress(worker_);
    if (ucp_request_check_status(request) == UCS_INPROGRESS) return;  // the worker's destruction frees it
    ucp_request_free(request);
  }
}

void UcxTransport::shutdown(bool graceful) {
  if (shut_down_ || worker_ == nullptr) {
    shut_down_ = true;
    return;
  }
  closing_ = true;
  // Cancel what is pending so that nothing lands in user memory after we return. Receives are cancelled
  // directly; a forced endpoint close completes the sends on it (a dead peer would never acknowledge them).
  for (Transfer* transfer : pending_.snapshot()) {
    if (!transfer->is_send && transfer->handle) ucp_request_cancel(worker_, transfer->handle);
    if (transfer->is_send && transfer->aux) ucp_request_cancel(worker_, transfer->aux);
  }
  if (!graceful) close_endpoints(false);
  Deadline deadline = Deadline::after_ms(kCloseTimeoutMs);
  while (!pending_.empty() && !deadline.expired()) {
    ucp_worker_progress(worker_);
    for (Transfer* transfer : pending_.snapshot()) check(*transfer);
  }
  for (Transfer* transfer : pending_.snapshot()) {
    // Still not released by UCX: forget it; the worker's destruction below frees it.
    transfer->state = Transfer::State::kFailed;
    transfer->failure = BAGUA_ERR_ABORTED;
    transfer->error = "cancelled";
    transfer->handle = nullptr;
    transfer->aux = nullptr;
  }
  pending_.clear();
  if (graceful) close_endpoints(true);
  discard_unmatched();
  ucp_worker_destroy(worker_);
  worker_ = nullptr;
  ucp_cleanup(context_);
  context_ = nullptr;
  shut_down_ = true;
}

// UCX 1.13 names an endpoint's transports only in ucp_ep_print_info's text (transport/ucx/ucx_text.h).
bool UcxTransport::sends_may_linger() const { return lanes_may_linger(describe()); }

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

#include "bootstrap/ring.h"

#include <poll.h>

#include <thread>

#include "base/error.h"
#include "base/logging.h"
#include "bootstrap/handshake.h"

namespace bagua {

namespace {
constexpr int kControlSendTimeoutMs = 500;

struct RingHello {
  uint64_t comm_id;
  int32_t rank;
  Bytes encode() const {
    Writer w;
    w.u64(comm_id);
    w.i32(rank);
    return std::move(w.out());
  }
};
}  // namespace

std::unique_ptr<BootstrapRing> BootstrapRing::connect(int rank, const JobTable& table, Socket listener,
                                                      const Bytes& secret, Deadline deadline,
                                                      const std::atomic<bool>* stop) {
  int nranks = static_cast<int>(table.ranks.size());
  std::unique_ptr<BootstrapRing> ring(new BootstrapRing(rank, nranks, stop));
  if (nranks == 1) return ring;
  int next = (rank + 1) % nranks;
  int prev = (rank + nranks - 1) % nranks;

  // Accept the previous rank's connection on a thread while this one connects to the next rank:
  // each side must answer its own listener for the other's handshake to finish.
  Socket from_prev;
  std::exception_ptr accept_error;
  std::thread acceptor_thread([&] {
    try {
      Acceptor acceptor(std::move(listener), secret, deadline.remaining_ms(), fmt::format("rank {} bootstrap", rank));
      while (!from_prev.valid()) {
        if (deadline.expired())
          fail(BAGUA_ERR_TIMEOUT, "rank {}: rank {} never connected to this rank's bootstrap listener", rank, prev);
        if (stop && stop->load()) fail(BAGUA_ERR_ABORTED, "aborted while forming the bootstrap ring");
        for (AcceptedPeer& peer : acceptor.poll(50)) {
          Reader r(peer.hello_body, "ring hello");
          uint64_t comm_id = r.u64();
          int32_t peer_rank = r.i32();
          if (comm_id != table.comm_id || peer_rank != prev) {
            BAGUA_WARN("rank {} bootstrap: refused {} (rank {} of another job or not the previous rank)", rank,
                       peer.address, peer_rank);
            continue;
          }
          from_prev = std::move(peer.sock);
        }
      }
    } catch (...) {
      accept_error = std::current_exception();
    }
  });
  std::exception_ptr connect_error;
  try {
    SockAddr next_addr = SockAddr::parse(table.ranks[next].listen_addr);
    ring->next_.sock = Socket::connect(next_addr, deadline, stop);
    client_handshake(ring->next_.sock, secret, RingHello{table.comm_id, rank}.encode(), deadline, stop);
  } catch (...) {
    connect_error = std::current_exception();
  }
  acceptor_thread.join();
  if (connect_error) std::rethrow_exception(connect_error);
  if (accept_error) std::rethrow_exception(accept_error);
  ring->next_.peer = next;
  ring->prev_.sock = std::move(from_prev);
  ring->prev_.peer = prev;
  return ring;
}

BootstrapRing::~BootstrapRing() = default;

void BootstrapRing::handle(Link& link, Frame frame) {
  switch (frame.type) {
    case FrameType::kData:
      if (&link != &prev_)
        fail(BAGUA_ERR_REMOTE, "rank {} sent bootstrap data the wrong way round the ring", link.peer);
      link.data.push_back(std::move(frame));
      return;
    case FrameType::kBye: link.said_bye = true; return;
    case FrameType::kAbort: {
      Reader r(frame.payload, "failure notice");
      int32_t origin = r.i32();
      int32_t status = r.i32();
      std::string message = r.str(2048);
      // A peer's timeout is reported as a timeout here too, and a mismatch of the ranks' calls (the call
      // fingerprints, core/tags.h) as the usage error it is on every rank; anything else means a peer went away.
      const bool usage = status == BAGUA_ERR_INVALID_USAGE;
      std::string text = fmt::format("rank {} {}: {}", origin, usage ? "found" : "failed", message);
      bagua_status_t local_status = status == BAGUA_ERR_TIMEOUT ? BAGUA_ERR_TIMEOUT
                                    : usage                     ? BAGUA_ERR_INVALID_USAGE
                                                                : BAGUA_ERR_REMOTE;
      // Pass it on away from where it came, once.
      Link& onward = &link == &prev_ ? next_ : prev_;
      if (!relayed_failure_.exchange(true)) {
        send_control(onward, FrameType::kAbort, frame.payload);
      }
      throw Error(local_status, text);
    }
    default:
      fail(BAGUA_ERR_REMOTE, "rank {} sent an unexpected {} frame on the bootstrap ring", link.peer,
           frame_type_name(frame.type));
  }
}

void BootstrapRing::pump(Link& link, int wait_ms) {
  if (!link.sock.valid() || link.closed) return;
  pollfd pfd{link.sock.fd(), POLLIN, 0};
  if (::poll(&pfd, 1, wait_ms) <= 0) return;
  uint8_t buf[65536];
  for (;;) {
    ssize_t n = link.sock.try_recv(buf, sizeof(buf));
    if (n == 0) return;
    if (n < 0) {
      link.closed = true;
      if (link.said_bye) return;
      std::string text = fmt::format("rank {} died: its bootstrap connection closed", link.peer);
      if (!relayed_failure_.exchange(true)) {
        Link& onward = &link == &prev_ ? next_ : prev_;
        Writer w;
        w.i32(link.peer);
        w.i32(BAGUA_ERR_REMOTE);
        w.str("its bootstrap connection closed (process died?)");
        send_control(onward, FrameType::kAbort, w.out());
      }
      throw Error(BAGUA_ERR_REMOTE, text);
    }
    size_t used = 0;
    while (used < static_cast<size_t>(n)) {
      used += link.parser.feed(buf + used, static_cast<size_t>(n) - used);
      if (link.parser.state() == FrameParser::State::kBad)
        fail(BAGUA_ERR_REMOTE, "rank {} sent a bad bootstrap frame: {}", link.peer, link.parser.error());
      if (link.parser.state() == FrameParser::State::kFrame) handle(link, link.parser.take());
    }
  }
}

void BootstrapRing::check_health() {
  if (nranks_ == 1) return;
  pump(prev_, 0);
  pump(next_, 0);
}

void BootstrapRing::send_control(Link& link, FrameType type, const Bytes& payload) {
  std::lock_guard<std::mutex> lock(send_mutex_);
  if (!link.sock.valid() || link.closed || mid_frame_.load()) return;
  try {
    send_frame(link.sock, type, payload, Deadline::after_ms(kControlSendTimeoutMs));
  } catch (const Error&) {
    // Best effort: the neighbour may be gone too. A frame may be half sent: nothing more goes on this link.
    link.closed = true;
  }
}

void BootstrapRing::notify_failure(bagua_status_t status, const std::string& message) {
  if (nranks_ == 1 || relayed_failure_.exchange(true)) return;
  Writer w;
  w.i32(rank_);
  w.i32(status);
  w.str(message);
  send_control(next_, FrameType::kAbort, w.out());
  send_control(prev_, FrameType::kAbort, w.out());
}

void BootstrapRing::say_goodbye() {
  if (nranks_ == 1) return;
  send_control(next_, FrameType::kBye, {});
  send_control(prev_, FrameType::kBye, {});
}

void BootstrapRing::shutdown() {
  next_.sock.shutdown();
  prev_.sock.shutdown();
}

void BootstrapRing::send_on(Link& link, FrameType type, const Bytes& payload, Deadline deadline) {
  Bytes frame = encode_frame(type, payload);
  size_t sent = 0;
  while (sent < frame.size()) {
    ssize_t n;
    {
      std::lock_guard<std::mutex> lock(send_mutex_);
      n = link.sock.try_send(frame.data() + sent, frame.size() - sent);
      mid_frame_.store(n >= 0 && sent + static_cast<size_t>(n) < frame.size());
    }
    if (n < 0) {
      check_health();  // reports the neighbour's death when that is why
      fail(BAGUA_ERR_REMOTE, "rank {}'s bootstrap connection broke", link.peer);
    }
    sent += static_cast<size_t>(n);
    if (sent == frame.size()) break;
    // Keep reading while the send is stuck, so two ranks sending large blocks to each other cannot deadlock.
    if (stop_ && stop_->load()) fail(BAGUA_ERR_ABORTED, "aborted during a bootstrap exchange");
    if (deadline.expired()) fail(BAGUA_ERR_TIMEOUT, "bootstrap send to rank {} timed out", link.peer);
    pollfd fds[2] = {{link.sock.fd(), POLLOUT, 0}, {prev_.sock.fd(), POLLIN, 0}};
    ::poll(fds, 2, deadline.remaining_ms(100));
    if (fds[1].revents) pump(prev_, 0);
  }
}

Frame BootstrapRing::next_data(Deadline deadline) {
  for (;;) {
    if (!prev_.data.empty()) {
      Frame frame = std::move(prev_.data.front());
      prev_.data.pop_front();
      return frame;
    }
    if (stop_ && stop_->load()) fail(BAGUA_ERR_ABORTED, "aborted during a bootstrap exchange");
    if (deadline.expired())
      fail(BAGUA_ERR_TIMEOUT, "rank {}: timed out waiting for rank {} in a bootstrap exchange", rank_, prev_.peer);
    if (prev_.closed) fail(BAGUA_ERR_REMOTE, "rank {} left the communicator", prev_.peer);
    pump(prev_, deadline.remaining_ms(100));
    pump(next_, 0);
  }
}

std::vector<Bytes> BootstrapRing::allgather(const Bytes& mine, Deadline deadline) {
  std::vector<Bytes> blocks(nranks_);
  blocks[rank_] = mine;
  uint64_t seq = ++sequence_;
  for (int step = 0; step < nranks_ - 1; ++step) {
    int send_index = (rank_ - step + nranks_) % nranks_;
    int recv_index = (rank_ - step - 1 + 2 * nranks_) % nranks_;
    Writer w;
    w.u64(seq);
    w.i32(send_index);
    w.bytes(blocks[send_index]);
    send_on(next_, FrameType::kData, w.out(), deadline);
    Frame frame = next_data(deadline);
    Reader r(frame.payload, "bootstrap block");
    uint64_t their_seq = r.u64();
    int32_t index = r.i32();
    if (their_seq != seq || index != recv_index)
      fail(BAGUA_ERR_INVALID_USAGE,
           "bootstrap exchange mismatch with rank {} (exchange {} vs {}): ranks called collectives in different orders",
           prev_.peer, their_seq, seq);
    blocks[recv_index] = r.bytes(frame_payload_cap(FrameType::kData));
  }
  return blocks;
}

}  // namespace bagua

#include "bootstrap/handshake.h"

#include <poll.h>
#include <sys/socket.h>

#include "base/error.h"
#include "base/logging.h"

namespace bagua {

namespace {
constexpr const char* kHelloLabel = "bagua-hello";
constexpr const char* kWelcomeLabel = "bagua-welcome";
}  // namespace

Bytes make_challenge_payload(const Bytes& server_nonce) { return server_nonce; }

bool verify_hello(const Bytes& secret, const Bytes& server_nonce, const Bytes& hello_payload, Bytes* body,
                  Bytes* welcome_payload, std::string* why) {
  if (hello_payload.size() < kNonceSize + 32) {
    *why = "HELLO too short";
    return false;
  }
  Bytes client_nonce(hello_payload.begin(), hello_payload.begin() + kNonceSize);
  const uint8_t* mac = hello_payload.data() + kNonceSize;
  Bytes hello_body(hello_payload.begin() + kNonceSize + 32, hello_payload.end());
  Digest expected = hmac_sha256(secret, {view(kHelloLabel), view(server_nonce), view(client_nonce), view(hello_body)});
  if (!digest_equal(expected.data(), mac)) {
    *why = "authentication failed (wrong secret)";
    return false;
  }
  Digest welcome = hmac_sha256(secret, {view(kWelcomeLabel), view(client_nonce), view(server_nonce)});
  *welcome_payload = Bytes(welcome.begin(), welcome.end());
  *body = std::move(hello_body);
  return true;
}

void client_handshake(Socket& sock, const Bytes& secret, const Bytes& hello_body, Deadline deadline,
                      const std::atomic<bool>* stop) {
  Frame challenge = recv_frame(sock, deadline, stop);
  if (challenge.type != FrameType::kChallenge || challenge.payload.size() != kNonceSize)
    fail(BAGUA_ERR_REMOTE, "{} did not start the bagua handshake", sock.peer_address().str());
  Bytes client_nonce = random_bytes(kNonceSize);
  Digest mac = hmac_sha256(secret, {view(kHelloLabel), view(challenge.payload), view(client_nonce), view(hello_body)});
  Writer w;
  w.raw(client_nonce.data(), client_nonce.size());
  w.raw(mac.data(), mac.size());
  w.raw(hello_body.data(), hello_body.size());
  send_frame(sock, FrameType::kHello, w.out(), deadline, stop);

  Frame reply;
  try {
    reply = recv_frame(sock, deadline, stop);
  } catch (const Error& e) {
    if (e.status() != BAGUA_ERR_REMOTE) throw;
    fail(BAGUA_ERR_REMOTE, "{} closed the connection during the handshake: is BAGUA_SECRET the same on every rank?",
         sock.peer_address().str());
  }
  if (reply.type == FrameType::kError) {
    raise_error_frame(reply.payload);
  }
  Digest expected = hmac_sha256(secret, {view(kWelcomeLabel), view(client_nonce), view(challenge.payload)});
  if (reply.type != FrameType::kWelcome || reply.payload.size() != 32 ||
      !digest_equal(expected.data(), reply.payload.data()))
    fail(BAGUA_ERR_REMOTE, "{} could not prove it holds the job secret", sock.peer_address().str());
}

struct Acceptor::Pending {
  Socket sock;
  std::string address;
  Deadline deadline;
  Bytes server_nonce;
  FrameParser parser;
  bool heard = false;  // any byte received
};

Acceptor::Acceptor(Socket listener, Bytes secret, int handshake_timeout_ms, std::string role, BodyCheck body_check)
    : listener_(std::move(listener)),
      secret_(std::move(secret)),
      handshake_timeout_ms_(handshake_timeout_ms),
      role_(std::move(role)),
      body_check_(std::move(body_check)) {}

Acceptor::~Acceptor() {
  for (Pending* conn : pending_) delete conn;
}

void Acceptor::refuse(Pending& conn, const std::string& why) {
  ++refused_;
  // The first refusals are warnings; a flood goes to the debug log.
  if (refused_ <= 10)
    BAGUA_WARN("{}: refused connection from {}: {}", role_, conn.address, why);
  else
    BAGUA_DEBUG("{}: refused connection from {}: {}", role_, conn.address, why);
  if (refused_ == 10) BAGUA_WARN("{}: further refused connections are logged at debug level", role_);
  conn.sock.close();
}

void Acceptor::accept_new() {
  for (;;) {
    int fd = accept4(listener_.fd(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) return;  // EAGAIN, or a transient error such as EMFILE; poll again later
    auto* conn = new Pending{Socket(fd), {}, Deadline::after_ms(handshake_timeout_ms_), random_bytes(kNonceSize), {}};
    conn->address = conn->sock.peer_address().str();
    Bytes challenge = encode_frame(FrameType::kChallenge, make_challenge_payload(conn->server_nonce));
    if (conn->sock.try_send(challenge.data(), challenge.size()) != static_cast<ssize_t>(challenge.size())) {
      refuse(*conn, "could not send the challenge");
      delete conn;
      continue;
    }
    if (pending_.size() >= kMaxPending) {
      refuse(*pending_.front(), "too many handshakes in progress; dropping the oldest");
      delete pending_.front();
      pending_.erase(pending_.begin());
    }
    pending_.push_back(conn);
  }
}

std::vector<AcceptedPeer> Acceptor::poll(int wait_ms) {
  std::vector<pollfd> fds;
  fds.push_back({listener_.fd(), POLLIN, 0});
  for (Pending* conn : pending_) fds.push_back({conn->sock.fd(), POLLIN, 0});
  int rc = ::poll(fds.data(), fds.size(), wait_ms);
  std::vector<AcceptedPeer> accepted;
  if (rc < 0) return accepted;

  std::vector<Pending*> still_pending;
  for (size_t i = 0; i < pending_.size(); ++i) {
    Pending* conn = pending_[i];
    bool done = false;
    if (fds[i + 1].revents != 0) {
      uint8_t buf[4096];
      size_t want = std::min(conn->parser.wanted(), sizeof(buf));
      ssize_t n = conn->sock.try_recv(buf, want);
      if (n < 0 && !conn->heard) {
        // Nothing sent at all: a dialer that gave up, e.g. one of an earlier agreement whose connection was still in
        // the listener's backlog. Not worth a warning.
        BAGUA_DEBUG("{}: {} closed without sending anything", role_, conn->address);
        conn->sock.close();
        done = true;
      } else if (n < 0) {
        refuse(*conn, "closed before completing the handshake");
        done = true;
      } else if (n > 0) {
        conn->heard = true;
        conn->parser.feed(buf, static_cast<size_t>(n));
      }
      if (!done && conn->parser.state() == FrameParser::State::kBad) {
        refuse(*conn, conn->parser.error());
        done = true;
      } else if (!done && conn->parser.state() == FrameParser::State::kFrame) {
        Frame frame = conn->parser.take();
        Bytes body, welcome;
        std::string why;
        if (frame.type != FrameType::kHello) {
          refuse(*conn, fmt::format("sent {} instead of HELLO", frame_type_name(frame.type)));
        } else if (!verify_hello(secret_, conn->server_nonce, frame.payload, &body, &welcome, &why)) {
          refuse(*conn, why);
        } else if (std::string other = body_check_ ? body_check_(body) : ""; !other.empty()) {
          BAGUA_DEBUG("{}: turned away {}: {}", role_, conn->address, other);
          conn->sock.close();
        } else {
          Bytes reply = encode_frame(FrameType::kWelcome, welcome);
          if (conn->sock.try_send(reply.data(), reply.size()) != static_cast<ssize_t>(reply.size()))
            refuse(*conn, "could not send WELCOME");
          else
            accepted.push_back({std::move(conn->sock), std::move(body), conn->address});
        }
        done = true;
      }
    }
    if (!done && conn->deadline.expired()) {
      refuse(*conn, "handshake not completed in time (half-open connection?)");
      done = true;
    }
    if (done)
      delete conn;
    else
      still_pending.push_back(conn);
  }
  pending_ = std::move(still_pending);
  if (fds[0].revents & POLLIN) accept_new();
  return accepted;
}

}  // namespace bagua

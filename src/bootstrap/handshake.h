// Challenge-response authentication of a bootstrap connection with HMAC-SHA256 over the job secret.
// The secret never crosses the wire; both sides prove they hold it:
//   server -> CHALLENGE { server_nonce }
//   client -> HELLO     { client_nonce, HMAC(secret, "bagua-hello"   | server_nonce | client_nonce | body), body }
//   server -> WELCOME   { HMAC(secret, "bagua-welcome" | client_nonce | server_nonce) }
// The HELLO's MAC also covers its body, so a rank's declared identity cannot be altered in flight.
// An empty secret runs the same exchange unauthenticated.
#pragma once

#include <atomic>
#include <functional>
#include <string>
#include <vector>

#include "bootstrap/hmac.h"
#include "bootstrap/socket.h"
#include "bootstrap/wire.h"

namespace bagua {

// Client side, blocking. Throws REMOTE when the server cannot prove the secret or closes the connection.
void client_handshake(Socket& sock, const Bytes& secret, const Bytes& hello_body, Deadline deadline,
                      const std::atomic<bool>* stop = nullptr);

// Server side pieces, used by the non-blocking Acceptor.
Bytes make_challenge_payload(const Bytes& server_nonce);
// Checks a HELLO payload; on success stores its body and the WELCOME payload to send back.
bool verify_hello(const Bytes& secret, const Bytes& server_nonce, const Bytes& hello_payload, Bytes* body,
                  Bytes* welcome_payload, std::string* why);

struct AcceptedPeer {
  Socket sock;
  Bytes hello_body;
  std::string address;
};

// Accepts connections on a listener and runs the server side of the handshake for many at once without
// blocking, so a stranger, a half-open connection or a flood cannot hold up the real ranks. Failed
// connections are closed and logged; at most kMaxPending handshakes are held (the oldest is dropped).
class Acceptor {
 public:
  static constexpr size_t kMaxPending = 128;

  // Says why a HELLO body is not for this acceptor ("" when it is). Such a connection is closed before WELCOME, so
  // that its client retries, and logged at debug level: a peer of another round, not a stranger.
  using BodyCheck = std::function<std::string(const Bytes& body)>;

  Acceptor(Socket listener, Bytes secret, int handshake_timeout_ms, std::string role, BodyCheck body_check = {});
  ~Acceptor();
  // Waits up to wait_ms; returns the connections that completed the handshake.
  std::vector<AcceptedPeer> poll(int wait_ms);
  size_t pending() const { return pending_.size(); }
  size_t refused() const { return refused_; }
  const Socket& listener() const { return listener_; }

 private:
  struct Pending;
  void accept_new();
  void refuse(Pending& conn, const std::string& why);
  Socket listener_;
  Bytes secret_;
  int handshake_timeout_ms_;
  std::string role_;
  BodyCheck body_check_;
  std::vector<Pending*> pending_;
  size_t refused_ = 0;
};

}  // namespace bagua

// HMAC-SHA256 and the challenge-response handshake over real loopback sockets.
#include <catch2/catch.hpp>

#include <thread>

#include "base/error.h"
#include "bootstrap/handshake.h"
#include "bootstrap/hmac.h"

using namespace bagua;

namespace {
Bytes text(const std::string& s) { return Bytes(s.begin(), s.end()); }

// Runs one client handshake against an Acceptor; returns the bodies the acceptor accepted.
struct HandshakeRun {
  std::vector<Bytes> accepted;
  bagua_status_t client_status = BAGUA_SUCCESS;
  std::string client_error;
};

HandshakeRun run_handshake(const Bytes& server_secret, const Bytes& client_secret, const Bytes& body) {
  Acceptor acceptor(Socket::listen(SockAddr::resolve("127.0.0.1", 0)), server_secret, 2000, "test");
  SockAddr addr = acceptor.listener().local_address();
  HandshakeRun run;
  std::thread client([&] {
    try {
      Socket sock = Socket::connect(addr, Deadline::after_ms(3000));
      client_handshake(sock, client_secret, body, Deadline::after_ms(3000));
    } catch (const Error& e) {
      run.client_status = e.status();
      run.client_error = e.what();
    }
  });
  Deadline until = Deadline::after_ms(3000);
  while (!until.expired() && run.accepted.empty()) {
    for (AcceptedPeer& peer : acceptor.poll(20)) run.accepted.push_back(peer.hello_body);
    if (acceptor.refused() > 0) break;
  }
  client.join();
  return run;
}
}  // namespace

TEST_CASE("HMAC-SHA256 matches RFC 4231 test case 2", "[hmac]") {
  Digest d = hmac_sha256(text("Jefe"), {view(text("what do ya ")), view(text("want for nothing?"))});
  CHECK(to_hex(Bytes(d.begin(), d.end())) == "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
}

TEST_CASE("hex secrets parse strictly", "[hmac]") {
  Bytes out;
  CHECK(parse_hex("00ff10Ab", &out));
  CHECK(out == Bytes{0x00, 0xff, 0x10, 0xab});
  CHECK_FALSE(parse_hex("abc", &out));
  CHECK_FALSE(parse_hex("zz", &out));
}

TEST_CASE("handshake with the right secret delivers the body", "[handshake]") {
  Bytes secret = random_bytes(32);
  HandshakeRun run = run_handshake(secret, secret, text("rank 3"));
  CHECK(run.client_status == BAGUA_SUCCESS);
  REQUIRE(run.accepted.size() == 1);
  CHECK(run.accepted[0] == text("rank 3"));
}

TEST_CASE("handshake with a wrong secret is refused on both sides", "[handshake]") {
  HandshakeRun run = run_handshake(random_bytes(32), random_bytes(32), text("intruder"));
  CHECK(run.accepted.empty());
  CHECK(run.client_status == BAGUA_ERR_REMOTE);
  CHECK_THAT(run.client_error, Catch::Contains("secret", Catch::CaseSensitive::No));
}

TEST_CASE("a server without the secret cannot fool a client", "[handshake]") {
  // The client holds a secret, the server has none: the client must refuse the WELCOME.
  Acceptor acceptor(Socket::listen(SockAddr::resolve("127.0.0.1", 0)), {}, 2000, "test");
  SockAddr addr = acceptor.listener().local_address();
  bagua_status_t status = BAGUA_SUCCESS;
  std::thread client([&] {
    try {
      Socket sock = Socket::connect(addr, Deadline::after_ms(3000));
      client_handshake(sock, random_bytes(32), text("x"), Deadline::after_ms(3000));
    } catch (const Error& e) {
      status = e.status();
    }
  });
  // The server refuses the HELLO (its MAC is over a different key), so the client sees a refusal either way.
  for (int i = 0; i < 50 && acceptor.refused() == 0; ++i) acceptor.poll(20);
  client.join();
  CHECK(status == BAGUA_ERR_REMOTE);
}

TEST_CASE("an empty secret on both sides runs unauthenticated", "[handshake]") {
  HandshakeRun run = run_handshake({}, {}, text("open"));
  CHECK(run.client_status == BAGUA_SUCCESS);
  CHECK(run.accepted.size() == 1);
}

TEST_CASE("the acceptor drops half-open connections after its handshake timeout", "[handshake]") {
  Acceptor acceptor(Socket::listen(SockAddr::resolve("127.0.0.1", 0)), random_bytes(32), 200, "test");
  SockAddr addr = acceptor.listener().local_address();
  Socket silent = Socket::connect(addr, Deadline::after_ms(1000));
  for (int i = 0; i < 5; ++i) acceptor.poll(20);
  CHECK(acceptor.pending() == 1);
  Deadline until = Deadline::after_ms(2000);
  while (acceptor.pending() > 0 && !until.expired()) acceptor.poll(20);
  CHECK(acceptor.pending() == 0);
  CHECK(acceptor.refused() == 1);
}

TEST_CASE("the acceptor holds at most kMaxPending handshakes", "[handshake]") {
  Acceptor acceptor(Socket::listen(SockAddr::resolve("127.0.0.1", 0)), random_bytes(32), 10000, "test");
  SockAddr addr = acceptor.listener().local_address();
  std::vector<Socket> silent;
  for (size_t i = 0; i < Acceptor::kMaxPending + 20; ++i) {
    silent.push_back(Socket::connect(addr, Deadline::after_ms(1000)));
    acceptor.poll(0);
  }
  for (int i = 0; i < 10; ++i) acceptor.poll(10);
  CHECK(acceptor.pending() <= Acceptor::kMaxPending);
  CHECK(acceptor.refused() >= 20);
}

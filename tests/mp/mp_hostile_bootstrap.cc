// Hostile traffic at a live rendezvous root: strangers, half-open and zero-byte connections, wrong secret,
// garbled and oversized messages, duplicate and out-of-range ranks, a wrong protocol version, another
// job's id, and a flood of 1000 bogus connections. Every one is refused, the real job still forms, and
// memory does not grow with the flood.
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "base/error.h"
#include "bootstrap/handshake.h"
#include "bootstrap/rendezvous.h"
#include "bootstrap/unique_id.h"
#include "core/config.h"
#include "mp/mp_check.h"

using namespace bagua;

namespace {
constexpr int kRanks = 3;

long rss_kib() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
  return -1;
}

void send_raw(const SockAddr& addr, const Bytes& bytes) {
  Socket sock = Socket::connect(addr, Deadline::after_ms(2000));
  sock.send_all(bytes.data(), bytes.size(), Deadline::after_ms(2000));
  // Wait for the root to hang up on us.
  uint8_t buf[256];
  try {
    for (;;) sock.recv_all(buf, 1, Deadline::after_ms(3000));
  } catch (const Error&) {
  }
}

Bytes header(uint16_t version, uint16_t type, uint32_t length) {
  Writer w;
  w.u32(kWireMagic);
  w.u16(version);
  w.u16(type);
  w.u32(length);
  return w.out();
}

// A properly authenticated join that the root must refuse; returns the root's error.
bagua_status_t bad_join(const UniqueId& uid, JoinRequest req, std::string* message) {
  Socket sock = Socket::connect(uid.root, Deadline::after_ms(2000));
  try {
    join_job(sock, uid.secret, req, Deadline::after_ms(3000), nullptr);
  } catch (const Error& e) {
    *message = e.what();
    return e.status();
  }
  return BAGUA_SUCCESS;
}

JoinRequest request_for(const UniqueId& uid, int rank, int nranks) {
  JoinRequest req;
  req.group_key = uid.group_key;
  req.rank = rank;
  req.nranks = nranks;
  req.config_hash = Config().agreement_hash();
  req.timeout_ms = 20000;
  req.info = {"attacker", "attacker", 1, 0, "127.0.0.1:9"};
  return req;
}
}  // namespace

int main() {
  bagua_unique_id_t id;
  MP_OK(bagua_get_unique_id(&id));
  UniqueId uid = UniqueId::decode(id);

  std::atomic<int> failures(0);
  std::vector<bagua_comm_t> comms(kRanks, nullptr);
  auto start_rank = [&](int r) {
    return std::thread([&, r] {
      bagua_config_t config = BAGUA_CONFIG_INITIALIZER;
      config.timeout_ms = 30000;
      if (bagua_comm_init_rank_config(&comms[r], kRanks, id, r, &config) != BAGUA_SUCCESS) {
        std::fprintf(stderr, "rank %d: init failed: %s\n", r, bagua_get_last_error(nullptr));
        ++failures;
      }
    });
  };
  // Rank 0 joins first and waits while the attacks run.
  std::thread rank0 = start_rank(0);
  usleep(200 * 1000);

  // Zero-byte connection, and a half-open one held for the whole test.
  { Socket s = Socket::connect(uid.root, Deadline::after_ms(2000)); }
  Socket half_open = Socket::connect(uid.root, Deadline::after_ms(2000));
  // A stranger speaking HTTP.
  std::string http = "GET / HTTP/1.0\r\n\r\n";
  send_raw(uid.root, Bytes(http.begin(), http.end()));
  // Oversized HELLO, wrong protocol version, unknown type.
  send_raw(uid.root, header(kWireVersion, 2, 1u << 30));
  send_raw(uid.root, header(kWireVersion + 7, 2, 8));
  send_raw(uid.root, header(kWireVersion, 200, 8));
  // A garbled HELLO: right header, random payload (its MAC cannot verify).
  {
    Bytes garbled = header(kWireVersion, 2, 100);
    Bytes junk = random_bytes(100);
    garbled.insert(garbled.end(), junk.begin(), junk.end());
    send_raw(uid.root, garbled);
  }
  // Wrong secret.
  {
    std::string message;
    UniqueId wrong = uid;
    wrong.secret = random_bytes(32);
    MP_CHECK(bad_join(wrong, request_for(uid, 1, kRanks), &message) == BAGUA_ERR_REMOTE);
    std::printf("wrong secret: %s\n", message.c_str());
  }
  // Authenticated but invalid joins: each gets a clear error and does not disturb the job.
  struct Case {
    const char* name;
    JoinRequest req;
    const char* expect;
  };
  JoinRequest other_job = request_for(uid, 1, kRanks);
  other_job.group_key ^= 1;
  JoinRequest bad_nranks = request_for(uid, 1, kRanks + 1);
  JoinRequest bad_hash = request_for(uid, 1, kRanks);
  Case cases[] = {
      {"duplicate rank", request_for(uid, 0, kRanks), "already joined"},
      {"out-of-range rank", request_for(uid, 5, kRanks), "outside"},
      {"another job", other_job, "another job"},
      {"wrong nranks", bad_nranks, "nranks"},
  };
  for (Case& c : cases) {
    std::string message;
    bagua_status_t status = bad_join(uid, c.req, &message);
    std::printf("%s: %s: %s\n", c.name, bagua_status_string(status), message.c_str());
    MP_CHECK(status == BAGUA_ERR_INVALID_USAGE);
    MP_CHECK(message.find(c.expect) != std::string::npos);
  }

  // 1000 bogus connections: warm up with 100, then measure the growth over 1000 more.
  auto flood = [&](int count) {
    for (int i = 0; i < count; ++i) {
      Socket s = Socket::connect(uid.root, Deadline::after_ms(2000));
      if (i % 2 == 0) {
        Bytes junk = random_bytes(64);
        s.send_all(junk.data(), junk.size(), Deadline::after_ms(1000));
      }
    }
  };
  flood(100);
  usleep(300 * 1000);
  long rss_before = rss_kib();
  flood(1000);
  usleep(500 * 1000);
  long rss_after = rss_kib();
  std::printf("RSS before the flood %ld KiB, after %ld KiB\n", rss_before, rss_after);
  MP_CHECK(rss_after - rss_before < 4096);

  // The real ranks still form the job.
  std::thread rank1 = start_rank(1);
  std::thread rank2 = start_rank(2);
  rank0.join();
  rank1.join();
  rank2.join();
  MP_CHECK(failures.load() == 0);
  std::vector<std::thread> barriers;
  for (int r = 0; r < kRanks; ++r)
    barriers.emplace_back([&, r] {
      if (bagua_barrier(comms[r], nullptr) != BAGUA_SUCCESS) ++failures;
    });
  for (auto& t : barriers) t.join();
  MP_CHECK(failures.load() == 0);
  for (bagua_comm_t comm : comms) MP_OK(bagua_comm_destroy(comm));
  std::printf("hostile bootstrap: job formed despite every attack\n");
  return 0;
}

#include "bootstrap/agreement.h"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <thread>

#include "base/error.h"
#include "base/logging.h"
#include "bootstrap/handshake.h"
#include "bootstrap/wire.h"

namespace bagua {

namespace {

using Clock = std::chrono::steady_clock;

enum class Msg : uint8_t { kPrepare = 1, kPromise = 2, kAccept = 3, kAccepted = 4, kNack = 5, kDecide = 6, kAlive = 7 };
// A ballot is round << kRoundShift | proposer rank: unique per proposer, ordered by round first.
constexpr int kRoundShift = 20;
constexpr int kPollSliceMs = 2;
constexpr int kLingerMs = 200;  // after deciding: how long to wait for peers to read what was sent

// The listener's descriptor for this agreement's Acceptor (which closes it), close-on-exec like every socket here.
Socket duplicate_listener(const Socket& listener) {
  int fd = ::fcntl(listener.fd(), F_DUPFD_CLOEXEC, 0);
  if (fd < 0) fail_errno(errno, "bagua_comm_shrink: duplicating the recovery listener");
  return Socket(fd);
}

void write_members(Writer& w, const std::vector<AgreementMember>& members) {
  w.u32(static_cast<uint32_t>(members.size()));
  for (const AgreementMember& m : members) {
    w.i32(m.old_rank);
    w.bytes(m.payload);
  }
}

std::vector<AgreementMember> read_members(Reader& r, int nranks) {
  uint32_t n = r.u32();
  if (n > static_cast<uint32_t>(nranks)) fail(BAGUA_ERR_REMOTE, "shrink: a proposal lists {} of {} ranks", n, nranks);
  std::vector<AgreementMember> members(n);
  for (AgreementMember& m : members) {
    m.old_rank = r.i32();
    if (m.old_rank < 0 || m.old_rank >= nranks) fail(BAGUA_ERR_REMOTE, "shrink: a proposal names rank {}", m.old_rank);
    m.payload = r.bytes(64u << 10);
  }
  return members;
}

std::string rank_list(const std::vector<int>& ranks) {
  std::string out;
  for (int r : ranks) out += (out.empty() ? "" : ", ") + std::to_string(r);
  return out.empty() ? "none" : out;
}

// Turns away, before WELCOME, a peer dialing for another agreement on the same listener (the shrink before or
// after this one, or the other agreement of this shrink): its dialer retries instead of taking this rank for dead.
Acceptor::BodyCheck other_session(uint64_t session) {
  return [session](const Bytes& body) -> std::string {
    try {
      Reader r(body, "shrink hello");
      if (r.u64() == session) return "";
    } catch (const Error&) {
      return "";  // malformed: adopt_new_links refuses it
    }
    return "it dialed for another agreement";
  };
}

class Agreement {
 public:
  Agreement(const AgreementParams& p, const Socket& listener, Deadline deadline, const std::atomic<bool>* stop)
      : p_(p),
        deadline_(deadline),
        stop_(stop),
        acceptor_(duplicate_listener(listener), p.secret, std::max(deadline.remaining_ms(), 1),
                  fmt::format("rank {} shrink", p.rank), other_session(p.session)),
        inbound_(p.nranks),
        outbound_(p.nranks),
        outbox_(p.nranks),
        dead_(p.nranks, false),
        last_heard_(p.nranks),
        quorum_(p.nranks / 2 + 1),
        rng_(std::random_device{}()) {}

  ~Agreement() {
    threads_stop_ = true;
    for (std::thread& t : dialers_) t.join();
  }

  std::vector<AgreementMember> run() {
    start_ = Clock::now();
    wait_from_ = std::max(start_, p_.wait_all_until);
    std::fill(last_heard_.begin(), last_heard_.end(), wait_from_);
    for (int peer = 0; peer < p_.nranks; ++peer)
      if (peer != p_.rank) dialers_.emplace_back([this, peer] { dial(peer); });
    while (!decided_) {
      if (stop_ && stop_->load()) fail(BAGUA_ERR_ABORTED, "aborted during bagua_comm_shrink's agreement");
      if (deadline_.expired()) give_up();
      adopt_new_links();
      read_links();
      if (decided_) break;
      send_heartbeats();
      lead();
    }
    linger();
    return decision_;
  }

 private:
  struct Link {
    Socket sock;
    FrameParser parser;
  };

  Bytes hello() const {
    Writer w;
    w.u64(p_.session);
    w.i32(p_.rank);
    return std::move(w.out());
  }

  // Dials a peer until it answers, its connection is refused (it is gone), or the agreement ends.
  void dial(int peer) {
    SockAddr address;
    try {
      address = SockAddr::parse(p_.addresses[peer]);
    } catch (const Error&) {
      report_dialed(peer, Socket(), true);
      return;
    }
    while (!threads_stop_ && !deadline_.expired()) {
      int error = 0;
      Socket sock = Socket::try_connect(address, Deadline::after_ms(500).earlier(deadline_), &threads_stop_, &error);
      if (!sock.valid()) {
        if (error == ECONNREFUSED) {
          report_dialed(peer, Socket(), true);
          return;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        continue;
      }
      try {
        // Blocks until the peer enters its own agreement and answers.
        client_handshake(sock, p_.secret, hello(), deadline_, &threads_stop_);
        report_dialed(peer, std::move(sock), false);
        return;
      } catch (const Error& e) {
        BAGUA_DEBUG("shrink: handshake with rank {}: {}", peer, e.what());
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    }
  }

  void report_dialed(int peer, Socket sock, bool refused) {
    std::lock_guard<std::mutex> lock(dialed_mutex_);
    dialed_.push_back({peer, std::move(sock), refused});
  }

  void adopt_new_links() {
    for (AcceptedPeer& accepted : acceptor_.poll(0)) {
      int peer = -1;
      try {
        Reader r(accepted.hello_body, "shrink hello");
        uint64_t session = r.u64();
        peer = r.i32();
        if (session != p_.session) peer = -1;
      } catch (const Error&) {
        peer = -1;
      }
      if (peer < 0 || peer == p_.rank || peer >= p_.nranks || inbound_[peer].sock.valid() || dead_[peer]) {
        BAGUA_WARN("rank {} shrink: refused {} (not a rank of this agreement)", p_.rank, accepted.address);
        continue;
      }
      inbound_[peer].sock = std::move(accepted.sock);
    }
    std::vector<Dialed> dialed;
    {
      std::lock_guard<std::mutex> lock(dialed_mutex_);
      dialed.swap(dialed_);
    }
    for (Dialed& d : dialed) {
      if (d.refused)
        mark_dead(d.peer, "its recovery listener refused the connection");
      else if (!dead_[d.peer])
        open_outbound(d.peer, std::move(d.sock));
    }
  }

  void open_outbound(int peer, Socket sock) {
    outbound_[peer].sock = std::move(sock);
    BAGUA_DEBUG("shrink: connected to rank {}", peer);
    std::vector<Bytes> queued;
    queued.swap(outbox_[peer]);
    for (const Bytes& message : queued) send(peer, message);
  }

  void mark_dead(int peer, const std::string& why) {
    if (dead_[peer]) return;
    dead_[peer] = true;
    outbox_[peer].clear();
    inbound_[peer].sock.close();
    outbound_[peer].sock.close();
    BAGUA_DEBUG("shrink: rank {} is gone: {}", peer, why);
  }

  void send(int peer, const Bytes& message) {
    if (peer == p_.rank) {
      handle(peer, message);
      return;
    }
    if (!outbound_[peer].sock.valid()) {
      // A peer's message can arrive before this rank's connection to it is up: the answer waits for it.
      if (!dead_[peer]) outbox_[peer].push_back(message);
      return;
    }
    try {
      send_frame(outbound_[peer].sock, FrameType::kAgree, message, Deadline::after_ms(1000).earlier(deadline_));
    } catch (const Error& e) {
      mark_dead(peer, e.what());
    }
  }

  // Messages come in on the inbound links; an outbound one only ever says that the peer closed it.
  void read_links() {
    std::vector<pollfd> fds;
    std::vector<Link*> links;
    std::vector<int> peers;
    for (int peer = 0; peer < p_.nranks; ++peer)
      for (Link* link : {&inbound_[peer], &outbound_[peer]})
        if (link->sock.valid()) {
          fds.push_back({link->sock.fd(), POLLIN, 0});
          links.push_back(link);
          peers.push_back(peer);
        }
    if (fds.empty()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(kPollSliceMs));
      return;
    }
    if (::poll(fds.data(), fds.size(), kPollSliceMs) <= 0) return;
    for (size_t i = 0; i < fds.size() && !decided_; ++i) {
      if (fds[i].revents == 0) continue;
      int peer = peers[i];
      Link& link = *links[i];
      if (!link.sock.valid()) continue;  // closed while handling an earlier one
      uint8_t buf[65536];
      ssize_t n = link.sock.try_recv(buf, sizeof buf);
      if (n < 0) {
        // The peer closed. Its last messages may still wait on the other connection (a DECIDE before it left):
        // the peer counts as gone once that one is read to its end too.
        link.sock.close();
        Link& other = &link == &inbound_[peer] ? outbound_[peer] : inbound_[peer];
        if (!other.sock.valid() || &link == &inbound_[peer]) mark_dead(peer, "its connection closed");
        continue;
      }
      size_t used = 0;
      while (used < static_cast<size_t>(n) && link.sock.valid() && !decided_) {
        used += link.parser.feed(buf + used, static_cast<size_t>(n) - used);
        if (link.parser.state() == FrameParser::State::kBad) {
          mark_dead(peer, "it sent a bad frame: " + link.parser.error());
        } else if (link.parser.state() == FrameParser::State::kFrame) {
          Frame frame = link.parser.take();
          if (frame.type != FrameType::kAgree) {
            mark_dead(peer, fmt::format("it sent a {} frame", frame_type_name(frame.type)));
            continue;
          }
          last_heard_[peer] = Clock::now();
          try {
            handle(peer, frame.payload);
          } catch (const Error& e) {
            mark_dead(peer, e.what());
          }
        }
      }
    }
  }

  // Every message, from a peer or from this rank to itself.
  void handle(int from, const Bytes& message) {
    Reader r(message, "shrink message");
    auto kind = static_cast<Msg>(r.u8());
    uint64_t ballot = r.u64();
    switch (kind) {
      case Msg::kPrepare: {
        if (ballot <= promised_) {
          send(from, nack(ballot));
          return;
        }
        promised_ = ballot;
        Writer w;
        w.u8(static_cast<uint8_t>(Msg::kPromise));
        w.u64(ballot);
        w.u64(accepted_ballot_);
        write_members(w, accepted_value_);
        w.bytes(p_.payload);
        send(from, w.out());
        return;
      }
      case Msg::kPromise: {
        uint64_t their_accepted = r.u64();
        std::vector<AgreementMember> their_value = read_members(r, p_.nranks);
        Bytes payload = r.bytes(64u << 10);
        if (phase_ != Phase::kPreparing || ballot != ballot_) return;
        promises_[from] = Promise{their_accepted, std::move(their_value), std::move(payload)};
        return;
      }
      case Msg::kAccept: {
        std::vector<AgreementMember> value = read_members(r, p_.nranks);
        if (ballot < promised_) {
          send(from, nack(ballot));
          return;
        }
        promised_ = ballot;
        accepted_ballot_ = ballot;
        accepted_value_ = std::move(value);
        Writer w;
        w.u8(static_cast<uint8_t>(Msg::kAccepted));
        w.u64(ballot);
        send(from, w.out());
        return;
      }
      case Msg::kAccepted:
        if (phase_ == Phase::kAccepting && ballot == ballot_) accepted_by_.insert(from);
        return;
      case Msg::kNack: {
        uint64_t higher = r.u64();
        round_ = std::max(round_, higher >> kRoundShift);
        if (phase_ != Phase::kIdle && ballot == ballot_) {
          phase_ = Phase::kIdle;  // another leader is ahead: back off, then try above it
          retry_at_ = Clock::now() + std::chrono::milliseconds(std::uniform_int_distribution<int>(5, 40)(rng_));
        }
        return;
      }
      case Msg::kDecide: decide(read_members(r, p_.nranks)); return;
      case Msg::kAlive: return;
    }
    fail(BAGUA_ERR_REMOTE, "shrink: unknown message kind {}", static_cast<int>(kind));
  }

  Bytes nack(uint64_t ballot) const {
    Writer w;
    w.u8(static_cast<uint8_t>(Msg::kNack));
    w.u64(ballot);
    w.u64(promised_);
    return std::move(w.out());
  }

  Bytes prepare_message() const {
    Writer w;
    w.u8(static_cast<uint8_t>(Msg::kPrepare));
    w.u64(ballot_);
    return std::move(w.out());
  }

  std::chrono::milliseconds grace() const { return std::chrono::milliseconds(p_.grace_ms); }

  // Not heard from for the grace period: unreachable, cut off after the mesh was up, or not in the agreement.
  bool silent(int r) const { return r != p_.rank && Clock::now() - last_heard_[r] > grace(); }

  // Lets the peers know this rank is still here, every quarter of the grace period.
  void send_heartbeats() {
    Clock::time_point now = Clock::now();
    if (now - last_heartbeat_ < grace() / 4) return;
    last_heartbeat_ = now;
    Writer w;
    w.u8(static_cast<uint8_t>(Msg::kAlive));
    w.u64(0);
    for (int peer = 0; peer < p_.nranks; ++peer)
      if (peer != p_.rank && outbound_[peer].sock.valid()) send(peer, w.out());
  }

  // The lowest rank that is neither known dead nor silent.
  int leader() const {
    for (int r = 0; r < p_.rank; ++r)
      if (!dead_[r] && !silent(r)) return r;
    return p_.rank;
  }

  void lead() {
    if (leader() != p_.rank) {
      phase_ = Phase::kIdle;
      return;
    }
    Clock::time_point now = Clock::now();
    if (phase_ == Phase::kIdle) {
      if (now < retry_at_) return;
      round_ = std::max(round_, promised_ >> kRoundShift) + 1;
      ballot_ = (round_ << kRoundShift) | static_cast<uint64_t>(p_.rank);
      phase_ = Phase::kPreparing;
      phase_start_ = now;
      promises_.clear();
      accepted_by_.clear();
      for (int peer = 0; peer < p_.nranks; ++peer) send(peer, prepare_message());
      return;
    }
    if (phase_ == Phase::kPreparing) {
      bool everyone = true;
      for (int r = 0; r < p_.nranks; ++r) everyone = everyone && (dead_[r] || promises_.count(r));
      // The grace period counts from the start of the agreement (or wait_all_until); a later ballot waits a little.
      bool waited = now - wait_from_ > grace() && now - phase_start_ > grace() / 4;
      if (static_cast<int>(promises_.size()) < quorum_ || (!everyone && !waited)) return;
      // Paxos: a value some acceptor already accepted must be proposed again; else the ranks that promised.
      const Promise* newest = nullptr;
      for (const auto& [r, promise] : promises_)
        if (promise.accepted_ballot > 0 && (!newest || promise.accepted_ballot > newest->accepted_ballot))
          newest = &promise;
      proposal_.clear();
      if (newest) {
        proposal_ = newest->accepted_value;
      } else {
        for (const auto& [r, promise] : promises_) proposal_.push_back({r, promise.payload});
      }
      phase_ = Phase::kAccepting;
      Writer w;
      w.u8(static_cast<uint8_t>(Msg::kAccept));
      w.u64(ballot_);
      write_members(w, proposal_);
      for (const auto& [r, promise] : promises_) send(r, w.out());
      return;
    }
    if (phase_ == Phase::kAccepting) {
      if (static_cast<int>(accepted_by_.size()) >= quorum_) {
        decide(proposal_);
        return;
      }
      // Stalled (an acceptor died, or answers too slowly): a higher ballot, which proposes the same value again.
      int can_answer = 0;
      for (const auto& [r, promise] : promises_) can_answer += !dead_[r] && !silent(r);
      if (can_answer < quorum_ || now - phase_start_ > grace()) {
        phase_ = Phase::kIdle;
        retry_at_ = now;
      }
    }
  }

  void decide(std::vector<AgreementMember> members) {
    if (decided_) return;
    decided_ = true;
    decision_ = std::move(members);
    Writer w;
    w.u8(static_cast<uint8_t>(Msg::kDecide));
    w.u64(ballot_);
    write_members(w, decision_);
    // Pass it on, so that every rank still waiting learns it even if the leader dies now.
    for (int peer = 0; peer < p_.nranks; ++peer)
      if (peer != p_.rank) send(peer, w.out());
  }

  // Lets the peers read the decision before the connections close: half-close, then drain until they close too.
  void linger() {
    // A DECIDE still waits for a peer whose connection is coming up: give it that time (bounded).
    Deadline flush = Deadline::after_ms(std::min(p_.grace_ms, 2000)).earlier(deadline_);
    auto queued = [&] {
      for (int peer = 0; peer < p_.nranks; ++peer)
        if (!outbox_[peer].empty() && !dead_[peer]) return true;
      return false;
    };
    while (queued() && !flush.expired()) {
      adopt_new_links();
      std::this_thread::sleep_for(std::chrono::milliseconds(kPollSliceMs));
    }
    Deadline until = Deadline::after_ms(kLingerMs);
    std::vector<int> open;
    for (int peer = 0; peer < p_.nranks; ++peer) {
      if (outbound_[peer].sock.valid()) ::shutdown(outbound_[peer].sock.fd(), SHUT_WR);
      if (inbound_[peer].sock.valid()) open.push_back(peer);
    }
    while (!open.empty() && !until.expired()) {
      std::vector<pollfd> fds;
      for (int peer : open) fds.push_back({inbound_[peer].sock.fd(), POLLIN, 0});
      if (::poll(fds.data(), fds.size(), kPollSliceMs) <= 0) continue;
      std::vector<int> still;
      for (size_t i = 0; i < fds.size(); ++i) {
        uint8_t buf[4096];
        if (fds[i].revents == 0 || inbound_[open[i]].sock.try_recv(buf, sizeof buf) >= 0)
          still.push_back(open[i]);
        else
          inbound_[open[i]].sock.close();
      }
      open.swap(still);
    }
  }

  [[noreturn]] void give_up() {
    std::vector<int> reached{p_.rank};
    for (int r = 0; r < p_.nranks; ++r)
      if (r != p_.rank && !dead_[r] && !silent(r)) reached.push_back(r);
    std::sort(reached.begin(), reached.end());
    if (static_cast<int>(reached.size()) < quorum_)
      fail(BAGUA_ERR_REMOTE,
           "reached only rank(s) {} of the {} {} before the timeout; the agreement needs a majority ({}). The "
           "others are dead or on the other side of a network partition",
           rank_list(reached), p_.nranks, p_.participants, quorum_);
    fail(BAGUA_ERR_TIMEOUT, "rank(s) {} of the {} {} were reached but did not agree before the timeout",
         rank_list(reached), p_.nranks, p_.participants);
  }

  struct Promise {
    uint64_t accepted_ballot = 0;
    std::vector<AgreementMember> accepted_value;
    Bytes payload;
  };
  struct Dialed {
    int peer;
    Socket sock;
    bool refused;
  };
  enum class Phase { kIdle, kPreparing, kAccepting };

  const AgreementParams& p_;
  Deadline deadline_;
  const std::atomic<bool>* stop_;
  Acceptor acceptor_;
  std::vector<Link> inbound_;               // accepted: the peer's messages to this rank
  std::vector<Link> outbound_;              // dialed: this rank's messages to the peer
  std::vector<std::vector<Bytes>> outbox_;  // messages for a peer whose outbound link is not up yet
  std::vector<bool> dead_;
  std::vector<Clock::time_point> last_heard_;  // the last message from each rank
  Clock::time_point last_heartbeat_;
  const int quorum_;
  std::mt19937 rng_;
  Clock::time_point start_;
  Clock::time_point wait_from_;  // the later of start_ and wait_all_until

  std::atomic<bool> threads_stop_{false};
  std::vector<std::thread> dialers_;
  std::mutex dialed_mutex_;
  std::vector<Dialed> dialed_;

  // Acceptor state.
  uint64_t promised_ = 0;
  uint64_t accepted_ballot_ = 0;
  std::vector<AgreementMember> accepted_value_;
  // Leader state.
  Phase phase_ = Phase::kIdle;
  uint64_t round_ = 0;
  uint64_t ballot_ = 0;
  Clock::time_point phase_start_;
  Clock::time_point retry_at_;
  std::map<int, Promise> promises_;
  std::set<int> accepted_by_;
  std::vector<AgreementMember> proposal_;

  bool decided_ = false;
  std::vector<AgreementMember> decision_;
};

}  // namespace

std::vector<AgreementMember> run_agreement(const AgreementParams& params, const Socket& listener, Deadline deadline,
                                           const std::atomic<bool>* stop) {
  if (params.nranks == 1) return {{0, params.payload}};
  Agreement agreement(params, listener, deadline, stop);
  return agreement.run();
}

}  // namespace bagua

// Comm, initialisation: joining the job at the rendezvous root, forming the communicator (bootstrap ring,
// layout, transport, the single-copy vote), splitting it, and shrinking it to its survivors.
#include "core/comm.h"
#include "core/idle_progress.h"
#include "core/tags.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <new>
#include <thread>

#include <sched.h>

#include <fmt/ranges.h>

#include "base/backoff.h"
#include "base/logging.h"
#include "base/process_identity.h"
#include "base/scratch_cache.h"
#include "bootstrap/agreement.h"
#include "bootstrap/rendezvous.h"
#include "bootstrap/root_server.h"
#include "kernels/device_runtime.h"
#include "topology/topology.h"
#include "transport/ucx/ucx_transport.h"

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

RankInfo local_rank_info(const Socket& listener) {
  RankInfo info;
  info.host_id = detect_host_id();
  char hostname[256] = {0};
  gethostname(hostname, sizeof(hostname) - 1);
  info.hostname = hostname;
  info.pid = static_cast<uint32_t>(getpid());
  info.pid_namespace = pid_namespace_id();
  info.listen_addr = listener.local_address().str();
  return info;
}

std::unique_ptr<Comm> Comm::create(int nranks, int rank, const RootLocation& root, const Config& config) {
  set_log_rank(rank);
  Deadline deadline = Deadline::after_ms(static_cast<long long>(config.timeout_ms) + kInitSlackMs);
  std::atomic<bool> never(false);

  Socket root_sock = connect_root(root, deadline, &never);
  // Listen for the ring on the interface that reaches the root, unless BAGUA_SOCKET_IFNAME says otherwise.
  SockAddr listen_addr;
  if (!socket_ifname_address(&listen_addr)) listen_addr = root_sock.local_address();
  listen_addr.set_port(0);
  Socket listener = Socket::listen(listen_addr);

  JoinRequest request;
  request.group_key = root.group_key;
  request.rank = rank;
  request.nranks = nranks;
  request.config_hash = config.agreement_hash();
  request.timeout_ms = config.timeout_ms;
  request.info = local_rank_info(listener);
  JobTable table = join_job(root_sock, root.secret, request, deadline, &never);
  root_sock.close();
  return form(rank, table, std::move(listener), root.secret, config, deadline);
}

// UCX sets up a lot lazily: the first message of each protocol to a peer (eager copy, rendezvous, single copy)
// allocates buffer pools and registers memory, about 150 us each on the development VM. Pay that here, for the
// peers the algorithms talk to (ring neighbours, and rank +- 2^k for recursive doubling, Rabenseifner and binomial
// trees), so that the first operations run as fast as later ones. The set is symmetric, so every rank posts the
// receives that match its peers' sends. Tag kind 0 is this exchange's (algorithms/tags.h starts at 1).
void Comm::warm_up(Deadline deadline) {
  if (nranks_ == 1) return;
  const std::vector<int>& ring = layout_.ring_order();
  std::vector<int> ring_index(static_cast<size_t>(nranks_), -1);
  for (size_t i = 0; i < ring.size(); ++i) ring_index[static_cast<size_t>(ring[i])] = static_cast<int>(i);
  auto peers_of = [&](int r) {
    std::vector<int> peers;
    auto add = [&](int p) {
      if (p != r && std::find(peers.begin(), peers.end(), p) == peers.end()) peers.push_back(p);
    };
    if (const int i = ring_index[static_cast<size_t>(r)]; i >= 0) {
      const int size = static_cast<int>(ring.size());
      add(ring[static_cast<size_t>((i + 1) % size)]);
      add(ring[static_cast<size_t>((i + size - 1) % size)]);
    }
    for (int d = 1; d < nranks_; d *= 2) {
      add((r + d) % nranks_);
      add((r - d % nranks_ + nranks_) % nranks_);
    }
    return peers;
  };
  auto on_this_host = [&](int r, const std::vector<int>& of) {
    return static_cast<size_t>(std::count_if(of.begin(), of.end(), [&](int p) { return host_of(p) == host_of(r); }));
  };
  const std::vector<int> peers = peers_of(rank_);
  // A failure cancels every transfer (they point at the buffers below) and tells the neighbours, so that they
  // report this rank instead of waiting for its messages.
  auto give_up = [&](bagua_status_t status, const std::string& message) {
    fail_everything(status, message);
    throw Error(status, message);
  };
  auto finish = [&](std::vector<Transfer>& transfers) {
    Backoff backoff;
    Clock::time_point last_health = Clock::now();
    for (;;) {
      if (transport_->progress() > 0)
        backoff.busy();
      else
        backoff.idle();
      bool all_done = true;
      for (Transfer& tr : transfers) {
        if (tr.state == Transfer::State::kPending) transport_->check(tr);
        if (tr.state == Transfer::State::kFailed)
          give_up(tr.failure == BAGUA_SUCCESS ? BAGUA_ERR_REMOTE : tr.failure,
                  fmt::format("warming up the connection to rank {}: {}", tr.peer, tr.error));
        all_done = all_done && tr.state == Transfer::State::kDone;
      }
      if (all_done) return;
      if (Clock::now() - last_health > std::chrono::milliseconds(1)) {
        last_health = Clock::now();
        try {
          ring_->check_health();  // a dead peer, or one that failed and said so
        } catch (const Error& e) {
          give_up(e.status(), e.what());
        }
      }
      if (deadline.expired())
        give_up(BAGUA_ERR_TIMEOUT, "warming up the connections to the peers did not finish before the timeout");
    }
  };
  auto tag = [&](int round, int source) {
    return make_tag(kind_only_fingerprint(TagKind::kWarmUp), static_cast<uint64_t>(round), 0, source);
  };

  // Two phases, with eager messages (SendMode::kEager, which stays eager below 64 KiB whatever the single-copy
  // threshold); the contents do not matter, and one receive buffer serves all receives.
  // 1. Messages of four fragments, to the peers on this host, that arrive before their receives, as the blocks of
  //    an alltoall often do: kHeldMessages in all (a FIFO's worth of fragments), shared out among those peers. A
  //    receiver keeps each such fragment's slot of its shared-memory FIFO (one FIFO of 64 for all its senders) and puts
  //    a fresh one in its place. A marker sent after them says they have all arrived (messages between two ranks stay
  //    in order); then the receives are posted.
  // 2. kEagerRounds messages of two fragments to every peer, whose receives are posted first, so that each sender
  //    writes every page of every slot now in its peers' FIFOs (64 fragments); then one single-copy message of the
  //    threshold or 64 KiB, whichever is larger (skipped when that is above 2 MiB, a way to turn single copy off).
  // A first touch of a shared page faults, and on the development VM a fault costs 20-60 us: with 128 messages of
  // 4 KiB here and nothing else, the first 24 operations of a 64 KiB alltoall on 2 ranks took about 20 faults and
  // 1.7 ms, against 3-4 faults and 0.4 ms now, for the same time in init. Holding more messages in phase 1 took
  // 10 ms more and left 2 faults.
  const int kHeldMessages = 16, kEagerRounds = 32;
  const size_t below_single_copy = std::max(config_.single_copy_bytes, kEagerSingleCopyMin) - 1;  // eager sends
  const size_t held_bytes = std::min<size_t>(32 << 10, below_single_copy);
  const size_t eager_bytes = std::min<size_t>(16 << 10, below_single_copy);
  const size_t large = std::max<size_t>(config_.single_copy_bytes, 64 << 10);
  const bool single_copy = large <= (2u << 20);
  std::vector<uint8_t> out(std::max(held_bytes, single_copy ? large : eager_bytes), 0), in(out.size());

  // Both ends of a pair must agree on how many messages go between them, so every rank shares kHeldMessages out
  // by the largest number of same-host peers that any rank has.
  std::vector<int> local;
  for (int peer : peers)
    if (host_of(peer) == host_of(rank_)) local.push_back(peer);
  size_t most_local = 0;
  for (int r = 0; r < nranks_; ++r) most_local = std::max(most_local, on_this_host(r, peers_of(r)));
  const int held_rounds =
      most_local == 0 ? 0 : (kHeldMessages + static_cast<int>(most_local) - 1) / static_cast<int>(most_local);
  const int marker = held_rounds;
  std::vector<Transfer> held(local.size() * static_cast<size_t>(held_rounds)), held_recvs(held.size());
  std::vector<Transfer> markers(local.size() * 2);
  size_t next = 0, next_marker = 0;
  for (int peer : local) {
    for (int round = 0; round < held_rounds; ++round)
      transport_->post_send(held[next++], peer, tag(round, rank_), out.data(), held_bytes, SendMode::kEager);
    transport_->post_send(markers[next_marker++], peer, tag(marker, rank_), out.data(), 1);
    transport_->post_recv(markers[next_marker++], peer, tag(marker, peer), in.data(), 1);
  }
  finish(markers);
  next = 0;
  for (int peer : local)
    for (int round = 0; round < held_rounds; ++round)
      transport_->post_recv(held_recvs[next++], peer, tag(round, peer), in.data(), held_bytes);
  finish(held_recvs);
  finish(held);

  const int first = marker + 1, last = first + kEagerRounds + (single_copy ? 1 : 0);
  std::vector<Transfer> expected(peers.size() * 2 * static_cast<size_t>(last - first));
  next = 0;
  for (int peer : peers)
    for (int round = first; round < last; ++round) {
      const bool eager = round < first + kEagerRounds;
      const size_t bytes = eager ? eager_bytes : large;
      transport_->post_recv(expected[next++], peer, tag(round, peer), in.data(), bytes);
      transport_->post_send(expected[next++], peer, tag(round, rank_), out.data(), bytes,
                            eager ? SendMode::kEager : SendMode::kDefault);
    }
  finish(expected);
  warm_up_counters_ = transport_->counters();
}

std::unique_ptr<Comm> Comm::form(int rank, const JobTable& table, Socket listener, const Bytes& secret,
                                 const Config& config, Deadline deadline) {
  std::unique_ptr<Comm> comm(new Comm());
  int nranks = static_cast<int>(table.ranks.size());
  comm->rank_ = rank;
  comm->nranks_ = nranks;
  comm->config_ = config;
  comm->recorder_.set_capacity(config.trace_size);
  comm->secret_ = secret;
  comm->listen_ip_ = listener.local_address();
  comm->listen_ip_.set_port(0);
  comm->comm_id_ = table.comm_id;
  comm->ranks_ = table.ranks;
  std::vector<std::string> host_ids;
  for (const RankInfo& info : table.ranks) host_ids.push_back(info.host_id);
  comm->layout_ = CommLayout(host_ids, rank);

  comm->ring_ = BootstrapRing::connect(rank, table, std::move(listener), secret, deadline, &comm->abort_requested_);
  if (config.bind_numa) {
    int node = bind_to_numa_node(comm->local_rank());
    if (node >= 0) BAGUA_INFO("bound to NUMA node {} (BAGUA_BIND=1)", node);
  }

  // More ranks on this host than the cores all of them may use together: waits then yield at once. Each rank's
  // affinity alone says nothing (a launcher may give each rank one core). The same exchange publishes each rank's
  // recovery listener, where bagua_comm_shrink's agreement meets once the ring may be broken.
  cpu_set_t mine;
  CPU_ZERO(&mine);
  if (sched_getaffinity(0, sizeof mine, &mine) != 0) CPU_ZERO(&mine);
  comm->recovery_listener_ = Socket::listen(comm->listen_ip_);
  Writer announce;
  announce.raw(&mine, sizeof mine);
  announce.str(comm->recovery_listener_.local_address().str());
  const std::string machine = detect_machine_id();
  announce.str(machine);
  std::vector<Bytes> announced = comm->ring_->allgather(announce.out(), deadline);
  // Ranks outnumber cores when those on this machine (not only this host: containers and the test bed's
  // namespaces share its cores) may use fewer cores between them than there are ranks.
  cpu_set_t machine_cores;
  CPU_ZERO(&machine_cores);
  int machine_ranks = 0;
  for (int r = 0; r < nranks; ++r) {
    Reader rd(announced[r], "rank announcement");
    cpu_set_t theirs;
    rd.raw(&theirs, sizeof theirs);
    comm->recovery_addresses_.push_back(rd.str(256));
    if (rd.str(256) != machine) continue;
    CPU_OR(&machine_cores, &machine_cores, &theirs);
    ++machine_ranks;
  }
  if (CPU_COUNT(&machine_cores) > 0 && machine_ranks > CPU_COUNT(&machine_cores)) {
    comm->ranks_outnumber_cores_ = true;
    Backoff::set_oversubscribed();
    BAGUA_DEBUG("{} ranks on this machine share {} cores: waits yield the core at once", machine_ranks,
                CPU_COUNT(&machine_cores));
  }

  // One UCX worker per communicator; worker addresses travel over the bootstrap ring.
  const RankInfo& me = table.ranks[rank];
  const bool other_pid_namespaces = std::any_of(table.ranks.begin(), table.ranks.end(), [&](const RankInfo& r) {
    return r.host_id == me.host_id && r.pid_namespace != me.pid_namespace;
  });
  comm->transport_ =
      std::make_unique<UcxTransport>(rank, nranks, config.timeout_ms, config.single_copy_bytes, other_pid_namespaces);
  std::vector<Bytes> addresses = comm->ring_->allgather(comm->transport_->local_address(), deadline);
  comm->transport_->connect(addresses);
  // Single-copy transfers between ranks of a host, when every rank can read its host peers' memory.
  std::vector<bool> same_host(nranks);
  for (int r = 0; r < nranks; ++r) same_host[r] = r != rank && table.ranks[r].host_id == table.ranks[rank].host_id;
  std::vector<Bytes> probes = comm->ring_->allgather(comm->transport_->single_copy_probe_blob(), deadline);
  bool can = comm->transport_->single_copy_probe(probes, same_host);
  // A one-host communicator also maps every rank's shared segment (same_host is then true for every peer).
  std::unique_ptr<SharedSegments> segments;
  if (comm->nhosts() == 1 && nranks > 1) {
    // Every rank takes part in the allgather; one whose probe failed sends no descriptor, and then no rank uses them.
    std::string why = can ? "" : "the cross-memory probe failed";
    if (can) segments = SharedSegments::create(rank, nranks, &why);
    std::vector<Bytes> descriptors = comm->ring_->allgather(segments ? segments->descriptor() : Bytes{}, deadline);
    if (segments && why.empty()) why = segments->map_peers(descriptors, same_host);
    if (!why.empty()) {
      BAGUA_DEBUG("no shared segments between host peers: {}", why);
      can = false;
    }
  }
  Bytes verdict = {static_cast<uint8_t>(can ? 1 : 0)};
  bool everyone_can = true;
  for (const Bytes& v : comm->ring_->allgather(verdict, deadline)) everyone_can = everyone_can && v[0] == 1;
  if (everyone_can) comm->transport_->enable_single_copy(same_host);
  comm->cross_memory_ = everyone_can;
  if (everyone_can && segments) {
    segments->close_descriptor();  // every peer has mapped it (the verdicts came after)
    comm->shared_segments_ = std::move(segments);
  }
  BAGUA_DEBUG("single-copy transfers between host peers: {}", everyone_can ? "on" : "off");
  comm->send_sequence_.assign(nranks, 0);
  comm->recv_sequence_.assign(nranks, 0);
  comm->warm_up(deadline);
  // Across hosts, and on one host where an endpoint carries messages over the network anyway (UCX_TLS=tcp):
  // through shared memory UCX writes a message into the receiver's memory, or keeps the send pending, so nothing is
  // left behind a completed one. (Endpoints made from worker addresses keep the transports chosen when they were
  // made. Registered after the warm-up, which may leave bytes behind as any call does.)
  if (config.idle_progress && comm->transport_->thread_safe() &&
      (comm->nhosts() > 1 || comm->transport_->sends_may_linger())) {
    comm->idle_progress_ = true;
    idle_progress_add(comm.get());
    if (comm->nhosts() == 1) BAGUA_DEBUG("progressed between calls: an endpoint carries messages over the network");
  }
  const size_t prefaulted = comm->transport_->prefault_shared_memory();
  BAGUA_DEBUG("faulted in {} KiB of the transport's shared memory ahead of use", prefaulted >> 10);
  // Choosing the device runtime, and starting CUDA where the process already uses it, belong to init rather than
  // to the first operation's pointer checks.
  device_runtime().prepare();
  if (Logger::instance().enabled(LogLevel::kDebug)) BAGUA_DEBUG("transport lanes:\n{}", comm->transport_->describe());
  BAGUA_INFO("communicator {:#x}{}: rank {} of {}, local rank {} of {} on host {} of {}", comm->comm_id_,
             config.comm_name.empty() ? "" : " (" + config.comm_name + ")", rank, nranks, comm->local_rank(),
             comm->local_size(), comm->layout_.host_index(), comm->nhosts());
  return comm;
}

std::unique_ptr<Comm> Comm::split(int color, int key) {
  std::lock_guard<std::timed_mutex> lock(engine_mutex_);
  check_usable();
  if (!active_.empty())
    fail(BAGUA_ERR_INVALID_USAGE, "{} operation(s) still in flight: finish them (bagua_wait) before bagua_comm_split",
         active_.size());
  Deadline deadline = op_deadline();
  uint64_t split_index = split_count_++;
  try {
    // Everyone publishes (color, key) and, when it takes part, a fresh listener for the child's ring.
    Socket listener;
    Writer w;
    w.i32(color);
    w.i32(key);
    if (color != BAGUA_SPLIT_NOCOLOR) {
      listener = Socket::listen(listen_ip_);
      write_rank_info(w, local_rank_info(listener));
    }
    std::vector<Bytes> blobs = ring_->allgather(w.out(), deadline);
    if (color == BAGUA_SPLIT_NOCOLOR) return nullptr;
    struct Member {
      int key;
      int old_rank;
      RankInfo info;
    };
    std::vector<Member> members;
    for (int r = 0; r < nranks_; ++r) {
      Reader rd(blobs[r], "split announcement");
      int their_color = rd.i32();
      int their_key = rd.i32();
      if (their_color != color) continue;
      members.push_back(Member{their_key, r, read_rank_info(rd)});
    }
    std::sort(members.begin(), members.end(), [](const Member& a, const Member& b) {
      return a.key != b.key ? a.key < b.key : a.old_rank < b.old_rank;
    });
    JobTable table;
    // Identical on every member: parent id, split ordinal and color.
    table.comm_id = (comm_id_ * 0x9e3779b97f4a7c15ull) ^ ((split_index + 1) * 0xbf58476d1ce4e5b9ull) ^
                    (static_cast<uint64_t>(static_cast<uint32_t>(color)) * 0x94d049bb133111ebull);
    int new_rank = -1;
    for (size_t i = 0; i < members.size(); ++i) {
      if (members[i].old_rank == rank_) new_rank = static_cast<int>(i);
      table.ranks.push_back(members[i].info);
    }
    Config child_config = config_;
    return form(new_rank, table, std::move(listener), secret_, child_config, deadline);
  } catch (const Error& e) {
    bagua_status_t status = abort_requested_.load() ? BAGUA_ERR_ABORTED : e.status();
    if (is_poisoning(status)) {
      fail_everything(status, e.what());
      check_usable();
    }
    throw;
  }
}

std::unique_ptr<Comm> Comm::shrink() {
  {
    std::lock_guard<std::timed_mutex> lock(engine_mutex_);
    if (!poisoned() && !active_.empty())
      fail(BAGUA_ERR_INVALID_USAGE,
           "{} operation(s) still in flight: finish them (bagua_wait) before bagua_comm_shrink", active_.size());
  }
  shrink_stop_.store(false);
  Deadline deadline = op_deadline();
  Socket listener = Socket::listen(listen_ip_);
  Writer contribution;
  write_rank_info(contribution, local_rank_info(listener));
  AgreementParams params;
  params.rank = rank_;
  params.nranks = nranks_;
  params.addresses = recovery_addresses_;
  params.secret = secret_;
  params.session = (comm_id_ * 0x9e3779b97f4a7c15ull) ^ ((++shrink_count_) * 0xd6e8feb86659fd93ull);
  params.payload = contribution.out();
  params.grace_ms = std::max(config_.timeout_ms / 4, 100);
  std::vector<AgreementMember> members = run_agreement(params, recovery_listener_, deadline, &shrink_stop_);

  JobTable table;
  table.comm_id = params.session * 0xbf58476d1ce4e5b9ull;
  int new_rank = -1;
  std::vector<int> kept;
  for (const AgreementMember& m : members) {
    if (m.old_rank == rank_) new_rank = static_cast<int>(table.ranks.size());
    Reader rd(m.payload, "shrink member");
    table.ranks.push_back(read_rank_info(rd));
    table.comm_id ^= static_cast<uint64_t>(m.old_rank) * 0x94d049bb133111ebull;
    kept.push_back(m.old_rank);
  }
  std::string kept_text = fmt::format("{}", fmt::join(kept, ", "));
  if (new_rank < 0)
    fail(BAGUA_ERR_REMOTE,
         "the survivors formed a communicator of old rank(s) {} without this rank (it came later "
         "than the grace period, or could not be reached)",
         kept_text);
  BAGUA_INFO("bagua_comm_shrink: old rank(s) {} of {} form the new communicator; this rank is rank {} of {}", kept_text,
             nranks_, new_rank, members.size());
  // The ranks decide within milliseconds of each other, so they share this deadline.
  const Deadline formation_deadline = op_deadline();
  std::unique_ptr<Comm> formed;
  std::string formation_error;
  bagua_status_t formation_status = BAGUA_SUCCESS;
  try {
    formed = form(new_rank, table, std::move(listener), secret_, config_, formation_deadline);
  } catch (const std::exception& e) {
    // Ranks see a failed formation at different times: at once (an unreachable member) or at the deadline (a member
    // that went silent). Going on together at the deadline lets their next shrinks start together, instead of the
    // first rank's agreement timing out before the others arrive.
    const auto* error = dynamic_cast<const Error*>(&e);
    formation_status = error ? error->status() : BAGUA_ERR_SYSTEM;
    formation_error = e.what();
    while (!formation_deadline.expired() && !shrink_stop_.load())
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  // A cut that lands as the formation completes lets some members form it and others not: the members agree on the
  // outcome and keep the new communicator only if every one of them formed it.
  std::string not_kept;
  try {
    not_kept = agree_on_formation(kept, new_rank, params, formed != nullptr, formation_deadline);
  } catch (const Error& e) {
    if (e.status() == BAGUA_ERR_ABORTED) {
      if (formed) formed->poison(BAGUA_ERR_ABORTED, "bagua_comm_abort was called while it formed");
      throw;
    }
    not_kept = fmt::format("the members could not agree on whether they formed it: {}", e.what());
  }
  if (not_kept.empty()) return formed;
  // Dropped without a goodbye: its ring and endpoints close as after a failure.
  if (formed) formed->poison(BAGUA_ERR_REMOTE, "dropped: not every member formed it (" + not_kept + ")");
  formed.reset();
  fail(formation_status != BAGUA_SUCCESS ? formation_status : BAGUA_ERR_REMOTE,
       "forming the new communicator of old rank(s) {} failed (a member died or was cut off after the agreement?); "
       "call bagua_comm_shrink again to go on without it: {}",
       kept_text, formation_error.empty() ? not_kept : formation_error);
}

std::string Comm::agree_on_formation(const std::vector<int>& members, int new_rank, const AgreementParams& survivors,
                                     bool formed, Deadline formation_deadline) {
  AgreementParams params;
  params.rank = new_rank;
  params.nranks = static_cast<int>(members.size());
  for (int old_rank : members) params.addresses.push_back(recovery_addresses_[old_rank]);
  params.secret = secret_;
  params.session = survivors.session ^ 0x6a09e667f3bcc909ull;  // its own session: not the survivors' agreement
  params.payload = Bytes{static_cast<uint8_t>(formed ? 1 : 0)};
  params.grace_ms = survivors.grace_ms;
  params.participants = "new members";
  // A member whose formation failed comes in at the formation deadline: those that formed wait for it until then.
  params.wait_all_until = formation_deadline.when();
  const Deadline deadline(formation_deadline.when() + std::chrono::milliseconds(config_.timeout_ms));
  std::vector<AgreementMember> reports = run_agreement(params, recovery_listener_, deadline, &shrink_stop_);
  std::vector<bool> formed_by(members.size(), false);
  for (const AgreementMember& m : reports) formed_by[m.old_rank] = m.payload.size() == 1 && m.payload[0] == 1;
  std::vector<int> failed;
  for (size_t i = 0; i < members.size(); ++i)
    if (!formed_by[i]) failed.push_back(members[i]);
  if (failed.empty()) return "";
  return fmt::format("old rank(s) {} did not form it or were not heard from", fmt::join(failed, ", "));
}

}  // namespace bagua

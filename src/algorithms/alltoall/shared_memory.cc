// Alltoall(v) between the ranks of one host through shared memory (transport/shared_segments.h). The block for
// rank p goes piece by piece through two slots that the sender's segment keeps for p: the sender copies a piece
// in, p copies it out. Both copies run at memory speed, where a single-copy read (process_vm_readv) is several
// times slower per byte.
//
// Pieces are a slot long (512 KiB up to 16 ranks); piece j uses slot j % 2. Before round j a rank has copied piece j of
// every block in; round j tells each peer so (the note carries the length of the block for that peer, checked in round
// 0); after it the rank copies piece j of every peer's block out, then piece j + 1 in. Slot j % 2 takes piece
// j + 2 only after round j + 1's note has arrived, and the peer sends it after copying piece j out. Two ranks
// exchange notes for as many rounds as the longer of their two blocks has pieces, and at least one.
//
// The segments serve one operation at a time, in call order (the dispatcher's tickets; the schedule's start
// gate waits for the turn, and the last round passes it on), and consecutive operations use alternate sets of
// slots. So an operation never writes slots that a peer may still read: the set it writes was last read two
// operations before, which every peer finished before it sent its round-0 note of the operation in between.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>

#include "algorithms/alltoall/layout.h"
#include "algorithms/registry.h"
#include "base/error.h"
#include "transport/shared_segments.h"

namespace bagua {

namespace {

// Holds the turn from the start gate until the last piece is out (or the operation goes away).
struct SegmentTurn {
  SharedSegments* segments = nullptr;
  uint64_t ticket = 0;
  bool held = false;
  bool take() { return held = segments->turn() == ticket; }
  void pass() {
    if (held) segments->pass_turn(ticket);
    held = false;
  }
  ~SegmentTurn() { pass(); }
};

static_assert(sizeof(size_t) == sizeof(uint64_t), "notes send a size_t as 8 bytes");

struct SharedMemoryWork {
  const uint8_t* src = nullptr;
  uint8_t* out = nullptr;
  int rank = 0;
  int nranks = 0;
  SharedSegments* segments = nullptr;
  size_t slot_bytes = 0;
  size_t set = 0;  // which set of slots: consecutive operations alternate
  // Where each peer's block sits, copied from the call (alltoallv's count arrays are the caller's only until the
  // call returns).
  std::vector<size_t> send_off, send_bytes, recv_off, recv_bytes;
  std::vector<uint64_t> note_from;  // [p]: the length of p's block for this rank, from each round's note
  SegmentTurn turn;

  size_t pieces_of(size_t bytes) const { return (bytes + slot_bytes - 1) / slot_bytes; }
  size_t piece_bytes(size_t bytes, size_t j) const { return std::min(slot_bytes, bytes - j * slot_bytes); }
  size_t slot(int reader, size_t j) const {
    return ((set * nranks + static_cast<size_t>(reader)) * 2 + j % 2) * slot_bytes;
  }

  void copy_in(size_t j) {
    for (int p = 0; p < nranks; ++p) {
      if (p == rank || j >= pieces_of(send_bytes[p])) continue;
      std::memcpy(segments->own() + slot(p, j), src + send_off[p] + j * slot_bytes, piece_bytes(send_bytes[p], j));
    }
  }
  void copy_out(size_t j) {
    for (int k = 1; k < nranks; ++k) {
      const int p = (rank + k) % nranks;  // readers spread over the segments
      if (j >= pieces_of(recv_bytes[p])) continue;
      std::memcpy(out + recv_off[p] + j * slot_bytes, segments->of(p) + slot(rank, j), piece_bytes(recv_bytes[p], j));
    }
  }
  void check_notes() const {
    for (int p = 0; p < nranks; ++p)
      if (p != rank && note_from[p] != recv_bytes[p])
        fail(BAGUA_ERR_INVALID_USAGE, "rank {} sends a block of {} bytes to rank {}, which expects {}", p, note_from[p],
             rank, recv_bytes[p]);
  }
};

std::unique_ptr<Schedule> alltoall_shared_memory(const CollectiveArgs& a, const ScheduleContext& ctx) {
  auto s = std::make_unique<Schedule>(ctx);
  const int n = ctx.nranks, r = ctx.rank;
  const AlltoallLayout l = alltoall_layout(a, n);
  const auto* src = static_cast<const uint8_t*>(a.sendbuf);
  auto* out = static_cast<uint8_t*>(a.recvbuf);
  const LocalStep own_block = copy_step(out + l.recv_off(r), src + l.send_off(r), l.send_bytes(r));
  if (n == 1) {
    s->prologue().push_back(own_block);
    return s;
  }
  if (ctx.shared_segments == nullptr) fail(BAGUA_ERR_INTERNAL, "alltoall over shared memory without segments");
  auto w = std::make_shared<SharedMemoryWork>();
  w->src = src;
  w->out = out;
  w->rank = r;
  w->nranks = n;
  w->segments = ctx.shared_segments;
  w->slot_bytes = ctx.shared_segments->slot_bytes();
  w->set = ctx.shared_ticket % 2;
  w->turn = {ctx.shared_segments, ctx.shared_ticket};
  w->note_from.resize(n);
  std::vector<size_t> rounds_with(n, 0);
  size_t rounds = 0;
  for (int p = 0; p < n; ++p) {
    w->send_off.push_back(l.send_off(p));
    w->send_bytes.push_back(l.send_bytes(p));
    w->recv_off.push_back(l.recv_off(p));
    w->recv_bytes.push_back(l.recv_bytes(p));
    if (p == r) continue;
    rounds_with[p] = std::max<size_t>({1, w->pieces_of(w->send_bytes[p]), w->pieces_of(w->recv_bytes[p])});
    rounds = std::max(rounds, rounds_with[p]);
  }
  s->hold(w);
  s->start_gate() = [work = w.get()] { return work->turn.take(); };
  s->prologue().push_back(call_step([work = w.get()] { work->copy_in(0); }));
  for (size_t j = 0; j < rounds; ++j) {
    Round& round = s->round();
    for (int p = 0; p < n; ++p) {
      if (p == r || j >= rounds_with[p]) continue;
      round.recvs.push_back({p, &w->note_from[p], sizeof(uint64_t)});
      // The note: the length of this rank's block for p (its send_bytes entry, stable while the schedule lives).
      round.sends.push_back({p, &w->send_bytes[p], sizeof(uint64_t), SendMode::kEager});
    }
    if (j == 0) {
      round.during.push_back(own_block);
      round.after.push_back(call_step([work = w.get()] { work->check_notes(); }));
    }
    round.after.push_back(call_step([work = w.get(), j] { work->copy_out(j); }));
    if (j + 1 < rounds) round.after.push_back(call_step([work = w.get(), j] { work->copy_in(j + 1); }));
  }
  s->last().after.push_back(call_step([work = w.get()] { work->turn.pass(); }));
  return s;
}

// A round per piece; every byte is copied twice at memory speed.
double cost(const CostTerms& t) {
  const double slot = static_cast<double>(shared_segment_slot_bytes(t.n));
  const double pieces = std::max(1.0, std::ceil(t.m / t.n / slot));
  return pieces * (t.alpha + (t.n - 1) * t.delta) + t.frac * t.m * t.beta * t.model.shared_copy_factor.at(t.m / t.n);
}

bool one_host(int, const HostLayout& hosts) { return hosts.size() <= 1; }

}  // namespace

// One host only, and only when every rank mapped its peers' segments at init (needs_cross_memory).
extern const AlgorithmEntry kAlltoallSharedMemory;
const AlgorithmEntry kAlltoallSharedMemory{
    Collective::kAlltoall, "shm", one_host, cost, run_schedule<alltoall_shared_memory>, true, true};

extern const AlgorithmEntry kAlltoallvSharedMemory;
const AlgorithmEntry kAlltoallvSharedMemory{
    Collective::kAlltoallv, "shm", one_host, cost, run_schedule<alltoall_shared_memory>, true, true};

}  // namespace bagua

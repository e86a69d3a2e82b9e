// Alltoall between the ranks of one host through shared memory (transport/shared_segments.h). The block for
// rank p goes piece by piece through two slots that the sender's segment keeps for p: the sender copies a piece
// in, p copies it out. Both copies run at memory speed, where a single-copy read (process_vm_readv) is several
// times slower per byte.
//
// Pieces are kSharedSegmentSlotBytes; piece j uses slot j % 2. Before round j a rank has copied piece j of every
// block in; round j tells each peer so (the note carries the block length, checked in round 0); after it the
// rank copies piece j of every peer's block out, then piece j + 1 in. Slot j % 2 takes piece j + 2 only after
// round j + 1's notes have arrived, and each peer sends those after copying piece j out.
//
// The segments serve one operation at a time (the schedule's start gate holds them until the last piece is
// out), and consecutive operations use alternate sets of slots. So an operation never writes slots that a peer
// may still read: the set it writes was last read in the operation before the previous one, which every peer
// finished before it sent its first note of the previous one.
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

struct SegmentLease {
  SharedSegments* segments = nullptr;
  bool held = false;
  bool take() { return held = segments->try_hold(); }
  void release() {
    if (held) segments->release();
    held = false;
  }
  ~SegmentLease() { release(); }
};

struct SharedMemoryWork {
  const uint8_t* src = nullptr;
  uint8_t* out = nullptr;
  size_t block = 0;
  int rank = 0;
  int nranks = 0;
  SharedSegments* segments = nullptr;
  size_t set = 0;     // which set of slots: consecutive operations alternate
  uint64_t note = 0;  // this rank's block length, sent every round
  std::vector<uint64_t> note_from;
  SegmentLease lease;

  size_t piece_bytes(size_t j) const { return std::min(kSharedSegmentSlotBytes, block - j * kSharedSegmentSlotBytes); }
  size_t slot(int reader, size_t j) const {
    return ((set * nranks + static_cast<size_t>(reader)) * 2 + j % 2) * kSharedSegmentSlotBytes;
  }

  void copy_in(size_t j) {
    for (int p = 0; p < nranks; ++p)
      if (p != rank)
        std::memcpy(segments->own() + slot(p, j), src + p * block + j * kSharedSegmentSlotBytes, piece_bytes(j));
  }
  void copy_out(size_t j) {
    for (int k = 1; k < nranks; ++k) {
      const int p = (rank + k) % nranks;  // readers spread over the segments
      std::memcpy(out + p * block + j * kSharedSegmentSlotBytes, segments->of(p) + slot(rank, j), piece_bytes(j));
    }
  }
  void check_notes() const {
    for (int p = 0; p < nranks; ++p)
      if (p != rank && note_from[p] != note)
        fail(BAGUA_ERR_INVALID_USAGE, "rank {} called alltoall with blocks of {} bytes, this rank with {}", p,
             note_from[p], note);
  }
};

std::unique_ptr<Schedule> alltoall_shared_memory(const CollectiveArgs& a, const ScheduleContext& ctx) {
  auto s = std::make_unique<Schedule>(ctx);
  const int n = ctx.nranks, r = ctx.rank;
  const size_t block = a.count * datatype_size(a.dtype);
  const auto* src = static_cast<const uint8_t*>(a.sendbuf);
  auto* out = static_cast<uint8_t*>(a.recvbuf);
  const LocalStep own_block = copy_step(out + r * block, src + r * block, block);
  if (n == 1 || block == 0) {
    s->prologue().push_back(own_block);
    return s;
  }
  if (ctx.shared_segments == nullptr) fail(BAGUA_ERR_INTERNAL, "alltoall over shared memory without segments");
  auto w = std::make_shared<SharedMemoryWork>();
  w->src = src;
  w->out = out;
  w->block = block;
  w->rank = r;
  w->nranks = n;
  w->segments = ctx.shared_segments;
  w->set = ctx.shared_segments->next_use() % 2;
  w->note = block;
  w->note_from.resize(n);
  w->lease.segments = ctx.shared_segments;
  s->hold(w);
  s->start_gate() = [work = w.get()] { return work->lease.take(); };
  s->prologue().push_back(call_step([work = w.get()] { work->copy_in(0); }));
  const size_t pieces = (block + kSharedSegmentSlotBytes - 1) / kSharedSegmentSlotBytes;
  for (size_t j = 0; j < pieces; ++j) {
    Round& round = s->round();
    for (int p = 0; p < n; ++p) {
      if (p == r) continue;
      round.recvs.push_back({p, &w->note_from[p], sizeof(uint64_t)});
      round.sends.push_back({p, &w->note, sizeof(uint64_t), SendMode::kEager});
    }
    if (j == 0) {
      round.during.push_back(own_block);
      round.after.push_back(call_step([work = w.get()] { work->check_notes(); }));
    }
    round.after.push_back(call_step([work = w.get(), j] { work->copy_out(j); }));
    if (j + 1 < pieces) round.after.push_back(call_step([work = w.get(), j] { work->copy_in(j + 1); }));
  }
  s->last().after.push_back(call_step([work = w.get()] { work->lease.release(); }));
  return s;
}

// A round per piece; every byte is copied twice at memory speed.
double cost(const CostTerms& t) {
  const double pieces = std::max(1.0, std::ceil(t.m / t.n / static_cast<double>(kSharedSegmentSlotBytes)));
  return pieces * (t.alpha + (t.n - 1) * t.delta) + t.frac * t.m * t.beta * t.model.shared_copy_factor;
}

bool one_host(int, const HostLayout& hosts) { return hosts.size() <= 1; }

}  // namespace

// One host only, and only when every rank mapped its peers' segments at init (needs_cross_memory).
extern const AlgorithmEntry kAlltoallSharedMemory;
const AlgorithmEntry kAlltoallSharedMemory{
    Collective::kAlltoall, "shm", one_host, cost, run_schedule<alltoall_shared_memory>, true};

}  // namespace bagua

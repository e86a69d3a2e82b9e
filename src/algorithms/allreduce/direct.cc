// Direct allreduce between the ranks of one host, by cross-memory attach (process_vm_readv/writev).
//
// Rank b owns block b. Round 0: every rank tells the others its pid, buffer addresses, count, datatype and
// op. Then each owner, segment by segment, reads that segment of its block from every peer into a small
// buffer, combines (own input first, then peers by ascending rank) into its own recvbuf, and writes the
// result straight into every peer's recvbuf. Round 1: every rank tells the others it is done; after it, no peer reads
// or writes this rank's buffers any more.
//
// Per rank, (n-1)/n of the vector N is read from peers and as much written into them; the ring with
// single-copy reads moves twice that, because each rank reads its result back from the owner. The segment
// buffer stays in cache. In place is safe: an owner reads a peer's input for its block before it writes
// that block. Before touching any peer, every rank checks that all agree on count, datatype and op (the
// messages of other algorithms get this from their sizes), so a mismatch is refused everywhere and nothing
// is written out of bounds.
#include <unistd.h>

#include <algorithm>
#include <cmath>

#include <cstring>
#include <functional>
#include <memory>

#include "algorithms/patterns/ring.h"
#include "algorithms/registry.h"
#include "base/error.h"
#include "base/scratch_cache.h"
#include "kernels/cpu/reduce.h"
#include "kernels/dtype.h"
#include "transport/cross_memory.h"

namespace bagua {

namespace {

struct PeerBuffers {
  uint64_t pid = 0;
  uint64_t sendbuf = 0;
  uint64_t recvbuf = 0;
  uint64_t count = 0;
  uint32_t dtype = 0;
  uint32_t op = 0;
};

struct DirectWork {
  Schedule* schedule = nullptr;
  CollectiveArgs args;
  int rank = 0;
  int nranks = 0;
  PeerBuffers mine;
  std::vector<PeerBuffers> peers;  // [r]: rank r's, from round 0
  uint8_t done = 1;
  std::vector<uint8_t> done_from;
  std::shared_ptr<uint8_t[]> segment;  // one segment of a peer's input
  std::function<void()> check_peers;

  static constexpr size_t kSegmentBytes = 256 << 10;
  static constexpr size_t kSegmentsPerCheck = 16;

  void check_agreement() const {
    for (int r = 0; r < nranks; ++r) {
      if (r == rank) continue;
      const PeerBuffers& p = peers[r];
      if (p.count != mine.count || p.dtype != mine.dtype || p.op != mine.op)
        fail(BAGUA_ERR_INVALID_USAGE, "rank {} called allreduce with {} x {} ({}), this rank with {} x {} ({})", r,
             p.count, datatype_name(static_cast<bagua_datatype_t>(p.dtype)),
             redop_name(static_cast<bagua_redop_t>(p.op)), mine.count, datatype_name(args.dtype), redop_name(args.op));
    }
  }

  void own_block() {
    check_agreement();
    if (check_peers) check_peers();
    const size_t elem = datatype_size(args.dtype);
    const size_t begin = ring::chunk_begin(args.count, nranks, rank),
                 count = ring::chunk_size(args.count, nranks, rank);
    const size_t seg_elems = kSegmentBytes / elem;
    auto* out = static_cast<uint8_t*>(args.recvbuf);
    const auto* in = static_cast<const uint8_t*>(args.sendbuf);
    size_t segments = 0;
    for (size_t e = begin; e < begin + count; e += seg_elems) {
      // A peer that failed may have returned already: stop writing into it as soon as we hear.
      if (check_peers && ++segments % kSegmentsPerCheck == 0) check_peers();
      const size_t n = std::min(seg_elems, begin + count - e), bytes = n * elem, at = e * elem;
      bool first = true;
      for (int r = 0; r < nranks; ++r) {
        if (r == rank) continue;
        std::string error =
            read_process_memory(static_cast<pid_t>(peers[r].pid), peers[r].sendbuf + at, segment.get(), bytes);
        if (!error.empty()) fail(BAGUA_ERR_REMOTE, "reading {} bytes of rank {}'s input failed: {}", bytes, r, error);
        schedule->add_direct_traffic(0, bytes);
        reduce_from(out + at, first ? in + at : out + at, segment.get(), n, args.dtype, args.op);
        first = false;
      }
      if (args.op == BAGUA_AVG) divide_by(out + at, n, args.dtype, nranks);
      for (int r = 0; r < nranks; ++r) {
        if (r == rank) continue;
        std::string error =
            write_process_memory(static_cast<pid_t>(peers[r].pid), peers[r].recvbuf + at, out + at, bytes);
        if (!error.empty())
          fail(BAGUA_ERR_REMOTE, "writing {} bytes into rank {}'s output failed: {}", bytes, r, error);
        schedule->add_direct_traffic(bytes, 0);
      }
    }
  }
};

std::unique_ptr<Schedule> allreduce_direct(const CollectiveArgs& a, const ScheduleContext& ctx) {
  auto s = std::make_unique<Schedule>(ctx);
  if (ctx.nranks == 1) {
    s->prologue().push_back(copy_step(a.recvbuf, a.sendbuf, a.count * datatype_size(a.dtype)));
    return s;
  }
  auto w = std::make_shared<DirectWork>();
  w->schedule = s.get();
  w->args = a;
  w->rank = ctx.rank;
  w->nranks = ctx.nranks;
  w->mine = {static_cast<uint64_t>(getpid()),        reinterpret_cast<uintptr_t>(a.sendbuf),
             reinterpret_cast<uintptr_t>(a.recvbuf), a.count,
             static_cast<uint32_t>(a.dtype),         static_cast<uint32_t>(a.op)};
  w->check_peers = ctx.check_peers;
  w->peers.resize(ctx.nranks);
  w->done_from.resize(ctx.nranks);
  const size_t own_bytes = ring::chunk_size(a.count, ctx.nranks, ctx.rank) * datatype_size(a.dtype);
  w->segment = take_scratch(std::min(DirectWork::kSegmentBytes, own_bytes));
  s->hold(w);
  s->round();
  s->round();
  Round& hello = s->rounds()[0];  // (round() may move earlier rounds: take both references after)
  Round& bye = s->rounds()[1];
  for (int r = 0; r < ctx.nranks; ++r) {
    if (r == ctx.rank) continue;
    hello.recvs.push_back({r, &w->peers[r], sizeof(PeerBuffers)});
    hello.sends.push_back({r, &w->mine, sizeof(PeerBuffers)});
    bye.recvs.push_back({r, &w->done_from[r], 1});
    bye.sends.push_back({r, &w->done, 1});
  }
  hello.after.push_back(call_step([work = w.get()] { work->own_block(); }));
  return s;
}

// Hello and done rounds; per segment one read and one write per peer.
double cost(const CostTerms& t) {
  const CostModel& c = t.model;
  const double segments = std::max(1.0, std::ceil(t.m / t.n / (256.0 * 1024)));
  return 2 * t.alpha + 2 * (t.n - 1) * t.delta + 2 * segments * (t.n - 1) * c.cross_memory_us +
         2 * t.frac * t.m * t.beta * c.direct_move_factor + t.frac * t.m * t.gamma;
}

}  // namespace

// One host only, and only when every rank could attach to its peers' memory at init.
extern const AlgorithmEntry kAllreduceDirect;
const AlgorithmEntry kAllreduceDirect{
    Collective::kAllreduce,         "direct", [](int, const HostLayout& hosts) { return hosts.size() <= 1; }, cost,
    run_schedule<allreduce_direct>, true};

}  // namespace bagua

// Direct allreduce between the ranks of one host, by cross-memory attach (process_vm_readv/writev).
//
// Rank b owns block b. Round 0: every rank tells the others its pid and buffer addresses. Then each owner,
// segment by segment, reads that segment of its block from every peer into a small buffer, combines (own
// input first, then peers by ascending rank) into its own recvbuf, and writes the result straight into
// every peer's recvbuf. Round 1: every rank tells the others it is done; after it, no peer reads or writes
// this rank's buffers any more.
//
// Each rank reads N and writes N bytes (N = the vector), against 1.5N read and N written by the ring with
// single-copy reads, where a rank must read its result back from the owner. The segment buffer stays in
// cache. In place is safe: an owner reads a peer's input for its block before it writes that block.
#include <cstring>

#include "algorithms/collectives.h"
#include "algorithms/patterns/ring.h"
#include "core/error.h"
#include "kernels/cpu/reduce.h"
#include "kernels/dtype.h"
#include "transport/cross_memory.h"

namespace bagua {

namespace {

struct PeerBuffers {
  uint64_t pid = 0;
  uint64_t sendbuf = 0;
  uint64_t recvbuf = 0;
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
  std::vector<uint8_t> segment;  // one segment of a peer's input

  static constexpr size_t kSegmentBytes = 256 << 10;

  void own_block() {
    const size_t elem = datatype_size(args.dtype);
    const size_t begin = ring::chunk_begin(args.count, nranks, rank), count = ring::chunk_size(args.count, nranks, rank);
    const size_t seg_elems = kSegmentBytes / elem;
    auto* out = static_cast<uint8_t*>(args.recvbuf);
    const auto* in = static_cast<const uint8_t*>(args.sendbuf);
    for (size_t e = begin; e < begin + count; e += seg_elems) {
      const size_t n = std::min(seg_elems, begin + count - e), bytes = n * elem, at = e * elem;
      bool first = true;
      for (int r = 0; r < nranks; ++r) {
        if (r == rank) continue;
        std::string error = read_process_memory(static_cast<pid_t>(peers[r].pid), peers[r].sendbuf + at,
                                                segment.data(), bytes);
        if (!error.empty()) fail(BAGUA_ERR_REMOTE, "reading {} bytes of rank {}'s input failed: {}", bytes, r, error);
        schedule->add_direct_traffic(0, bytes);
        reduce_from(out + at, first ? in + at : out + at, segment.data(), n, args.dtype, args.op);
        first = false;
      }
      if (args.op == BAGUA_AVG) divide_by(out + at, n, args.dtype, nranks);
      for (int r = 0; r < nranks; ++r) {
        if (r == rank) continue;
        std::string error = write_process_memory(static_cast<pid_t>(peers[r].pid), peers[r].recvbuf + at, out + at, bytes);
        if (!error.empty()) fail(BAGUA_ERR_REMOTE, "writing {} bytes into rank {}'s output failed: {}", bytes, r, error);
        schedule->add_direct_traffic(bytes, 0);
      }
    }
  }
};

}  // namespace

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
  w->mine = {static_cast<uint64_t>(getpid()), reinterpret_cast<uintptr_t>(a.sendbuf),
             reinterpret_cast<uintptr_t>(a.recvbuf)};
  w->peers.resize(ctx.nranks);
  w->done_from.resize(ctx.nranks);
  w->segment.resize(DirectWork::kSegmentBytes);
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

}  // namespace bagua

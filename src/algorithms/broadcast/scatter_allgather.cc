// Broadcast of large messages: scatter, then allgather (Van de Geijn).
#include "algorithms/block_layout.h"
#include "algorithms/patterns/binomial.h"
#include "algorithms/patterns/ring.h"
#include "algorithms/registry.h"
#include "algorithms/schedule.h"
#include "kernels/dtype.h"

namespace bagua {

namespace {

// Van de Geijn: a binomial scatter of n chunks (in relative-rank order), then a ring allgather.
std::unique_ptr<Schedule> broadcast_scatter_allgather(const CollectiveArgs& a, const ScheduleContext& ctx) {
  auto s = std::make_unique<Schedule>(ctx);
  const int n = ctx.nranks;
  BlockLayout chunks = BlockLayout::balanced(a.count, n, a.dtype);
  auto* buf = static_cast<uint8_t*>(a.recvbuf);
  if (ctx.rank == a.root) s->prologue().push_back(copy_step(buf, a.sendbuf, a.count * datatype_size(a.dtype)));
  int vr = binomial::relative(ctx.rank, a.root, n);
  auto span_bytes = [&](int first, int last) {  // relative chunks [first, last)
    last = std::min(last, n);
    return chunks.offset_bytes(last - 1) + chunks.bytes(last - 1) - chunks.offset_bytes(first);
  };
  for (int i = 0; i < binomial::ceil_log2(n); ++i) {
    int mask = binomial::broadcast_mask(i, n);
    Round& round = s->round();
    if (int from = binomial::receive_from(vr, mask); from >= 0)
      round.recvs.push_back(
          {binomial::absolute(from, a.root, n), buf + chunks.offset_bytes(vr), span_bytes(vr, vr + mask)});
    if (int to = binomial::send_to(vr, mask, n); to >= 0)
      round.sends.push_back(
          {binomial::absolute(to, a.root, n), buf + chunks.offset_bytes(to), span_bytes(to, to + mask)});
  }
  // Ring allgather in relative ranks (ring neighbours are the same in absolute ranks).
  for (int k = 0; k < n - 1; ++k) {
    int send_chunk = ring::wrap(vr - k, n), recv_chunk = ring::wrap(vr - k - 1, n);
    Round& round = s->round();
    round.recvs.push_back({ring::prev(ctx.rank, n), buf + chunks.offset_bytes(recv_chunk), chunks.bytes(recv_chunk)});
    round.sends.push_back({ring::next(ctx.rank, n), buf + chunks.offset_bytes(send_chunk), chunks.bytes(send_chunk)});
  }
  return s;
}

double cost(const CostTerms& t) { return (t.levels + t.n - 1) * t.alpha + 2 * t.frac * t.m * t.beta; }

}  // namespace

extern const AlgorithmEntry kBroadcastScatterAllgather;
const AlgorithmEntry kBroadcastScatterAllgather{Collective::kBroadcast, "scatter_allgather", nullptr, cost,
                                                run_schedule<broadcast_scatter_allgather>};

}  // namespace bagua

// Hierarchical allgather (hierarchical/groups.h): gather to host leaders, leaders exchange host bundles,
// leaders broadcast inside their hosts.
#include "algorithms/hierarchical/groups.h"
#include "algorithms/registry.h"
#include "algorithms/schedule.h"
#include "kernels/dtype.h"

namespace bagua {

namespace {

std::unique_ptr<Schedule> allgather_hierarchical(const CollectiveArgs& a, const ScheduleContext& ctx) {
  auto s = std::make_unique<Schedule>(ctx);
  Place me = place_of(ctx, ctx.rank);
  const std::vector<int>& host = ctx.hosts()[me.host];
  std::vector<int> leader_of = leaders(ctx, -1);
  const int leader = leader_of[me.host];
  BlockLayout blocks = BlockLayout::uniform(a.count, ctx.nranks, a.dtype);
  auto* out = static_cast<uint8_t*>(a.recvbuf);
  size_t block = blocks.bytes(0);
  s->prologue().push_back(copy_step(out + blocks.offset_bytes(ctx.rank), a.sendbuf, block));
  // 1. Every rank's block to its leader, straight into place.
  {
    Round& round = s->round();
    if (ctx.rank == leader) {
      for (int r : host)
        if (r != leader) round.recvs.push_back({r, out + blocks.offset_bytes(r), block});
    } else {
      round.sends.push_back({leader, out + blocks.offset_bytes(ctx.rank), block});
    }
  }
  // 2. Leaders exchange their hosts' blocks, one message per block.
  {
    Round& round = s->round();
    if (ctx.rank == leader) {
      for (size_t h = 0; h < ctx.hosts().size(); ++h) {
        if (static_cast<int>(h) == me.host) continue;
        for (int r : ctx.hosts()[h]) round.recvs.push_back({leader_of[h], out + blocks.offset_bytes(r), block});
        for (int r : host) round.sends.push_back({leader_of[h], out + blocks.offset_bytes(r), block});
      }
    }
  }
  // 3. Leaders hand the whole result to their host.
  broadcast_from_leader(*s, ctx, leader, host, out, block * ctx.nranks);
  return s;
}

double cost(const CostTerms& t) { return 3 * t.alpha + t.m * t.beta_intra + (t.H - 1.0) / t.H * t.m * t.beta_inter; }

}  // namespace

extern const AlgorithmEntry kAllgatherHier;
const AlgorithmEntry kAllgatherHier{Collective::kAllgather, "hier",
                                    [](int, const HostLayout& hosts) {
                                      if (hosts.size() < 2) return false;
                                      for (const auto& h : hosts)  // leaders send one message per local rank (<= 64)
                                        if (h.size() > 64) return false;
                                      return true;
                                    },
                                    cost, run_schedule<allgather_hierarchical>};

}  // namespace bagua

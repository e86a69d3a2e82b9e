#include "algorithms/gossip/lpdec.h"

#include <cstring>

#include "algorithms/dispatch.h"
#include "algorithms/schedule.h"
#include "algorithms/tags.h"

namespace bagua {
namespace {

std::unique_ptr<Schedule> new_schedule(Comm& comm) {
  ScheduleContext ctx = make_context(comm, TagKind::kLowPrecisionDecentralized, BAGUA_FLOAT32, BAGUA_SUM);
  return std::make_unique<Schedule>(ctx);
}

}  // namespace

LowPrecisionDecentralized::LowPrecisionDecentralized(Comm& comm, size_t count, const Codec& codec, const float* initial)
    : comm_(comm),
      count_(count),
      codec_(codec),
      ring_(Topology::builtin(comm.size(), BAGUA_TOPO_RING)),
      self_(initial, initial + count) {
  if (codec.error_feedback()) error_.assign(count, 0.0f);
  NeighborPlan plan = ring_.plan(comm.rank(), 0);
  auto s = new_schedule(comm);
  Round& round = s->round();
  for (auto& [peer, weight] : plan.receives) {
    auto& replica = neighbours_[peer];
    replica.resize(count);
    round.recvs.push_back({peer, replica.data(), count * sizeof(float)});
  }
  for (int peer : plan.sends) round.sends.push_back({peer, self_.data(), count * sizeof(float)});
  ScheduleOp op(BAGUA_OPKIND_NEIGHBOR_ALLREDUCE, "lpdec: initial replicas", std::move(s));
  run_to_completion(comm, op);
}

void LowPrecisionDecentralized::step(float* x) {
  NeighborPlan plan = ring_.plan(comm_.rank(), 0);
  // t = x + (weighted replica average - own replica); then the difference to send.
  std::vector<float> diff(count_);
  const float ws = static_cast<float>(plan.self_weight);
  for (size_t i = 0; i < count_; ++i) diff[i] = ws * self_[i];
  for (auto& [peer, weight] : plan.receives) {
    const float w = static_cast<float>(weight);
    const float* r = neighbours_[peer].data();
    for (size_t i = 0; i < count_; ++i) diff[i] += w * r[i];
  }
  for (size_t i = 0; i < count_; ++i) diff[i] = (x[i] + (diff[i] - self_[i])) - self_[i];

  const size_t bytes = codec_.compressed_bytes(count_);
  auto s = new_schedule(comm_);
  uint8_t* mine = s->scratch(bytes);
  RoundingKey key{codec_.stochastic(), codec_.seed(), steps_++, static_cast<uint32_t>(comm_.rank()), 0};
  codec_.compress(diff.data(), count_, error_.empty() ? nullptr : error_.data(), key, mine);
  Round& round = s->round();
  std::vector<std::pair<int, uint8_t*>> theirs;
  for (auto& [peer, weight] : plan.receives) {
    uint8_t* buf = s->scratch(bytes);
    round.recvs.push_back({peer, buf, bytes});
    theirs.emplace_back(peer, buf);
  }
  for (int peer : plan.sends) round.sends.push_back({peer, mine, bytes});
  ScheduleOp op(BAGUA_OPKIND_NEIGHBOR_ALLREDUCE, fmt::format("lpdec step {} ({} floats)", steps_ - 1, count_),
                std::move(s));
  run_to_completion(comm_, op);  // (s is owned by op; the buffers live until op is destroyed)
  codec_.decompress_accumulate(mine, count_, self_.data());
  for (auto& [peer, buf] : theirs) codec_.decompress_accumulate(buf, count_, neighbours_[peer].data());
  std::memcpy(x, self_.data(), count_ * sizeof(float));
}

const std::vector<float>& LowPrecisionDecentralized::replica(int which) const {
  if (which == 0 || comm_.size() == 1) return self_;
  int n = comm_.size();
  int peer = which < 0 ? (comm_.rank() + n - 1) % n : (comm_.rank() + 1) % n;
  return neighbours_.at(peer);
}

}  // namespace bagua

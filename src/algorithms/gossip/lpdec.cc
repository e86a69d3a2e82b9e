#include "algorithms/gossip/lpdec.h"

#include <cstring>

#include "algorithms/dispatch.h"
#include "algorithms/schedule.h"
#include "core/tags.h"

namespace bagua {
namespace {

// details: count, and for a step its number and the compression.
std::unique_ptr<Schedule> new_schedule(Comm& comm, CallDetails details) {
  ScheduleContext ctx = make_context(comm, TagKind::kLowPrecisionDecentralized, BAGUA_FLOAT32, BAGUA_SUM, details);
  return std::make_unique<Schedule>(ctx);
}

NeighborPlan ring_plan(const Comm& comm) {
  return Topology::builtin(comm.size(), BAGUA_TOPO_RING).plan(comm.rank(), 0);
}

}  // namespace

std::vector<int> lpdec_neighbours(const Comm& comm) {
  std::vector<int> peers;
  for (auto& [peer, weight] : ring_plan(comm).receives) peers.push_back(peer);
  return peers;
}

void lpdec_exchange_initial(Comm& comm, const LpdecSlice& slice) {
  NeighborPlan plan = ring_plan(comm);
  auto s = new_schedule(comm, {slice.count, 0});
  Round& round = s->round();
  for (auto& [peer, weight] : plan.receives)
    round.recvs.push_back({peer, slice.neighbours.at(peer), slice.count * sizeof(float)});
  for (int peer : plan.sends) round.sends.push_back({peer, slice.self, slice.count * sizeof(float)});
  ScheduleOp op(BAGUA_OPKIND_NEIGHBOR_ALLREDUCE, "lpdec: initial replicas", std::move(s));
  run_to_completion(comm, op);
}

void lpdec_step(Comm& comm, const Codec& codec, const LpdecSlice& slice, uint64_t step, float* x) {
  NeighborPlan plan = ring_plan(comm);
  const size_t count = slice.count;
  float* self = slice.self;
  // t = x + (weighted replica average - own replica); then the difference to send.
  std::vector<float> diff(count);
  const float ws = static_cast<float>(plan.self_weight);
  for (size_t i = 0; i < count; ++i) diff[i] = ws * self[i];
  for (auto& [peer, weight] : plan.receives) {
    const float w = static_cast<float>(weight);
    const float* r = slice.neighbours.at(peer);
    for (size_t i = 0; i < count; ++i) diff[i] += w * r[i];
  }
  for (size_t i = 0; i < count; ++i) diff[i] = (x[i] + (diff[i] - self[i])) - self[i];

  const size_t bytes = codec.compressed_bytes(count);
  auto s = new_schedule(comm, {count, mix_details(step, hash_name(codec.describe().c_str()))});
  uint8_t* mine = s->scratch(bytes);
  RoundingKey key{codec.stochastic(), codec.seed(), step, static_cast<uint32_t>(comm.rank()), slice.index_base};
  codec.compress(diff.data(), count, slice.error, key, mine);
  Round& round = s->round();
  std::vector<std::pair<int, uint8_t*>> theirs;
  for (auto& [peer, weight] : plan.receives) {
    uint8_t* buf = s->scratch(bytes);
    round.recvs.push_back({peer, buf, bytes});
    theirs.emplace_back(peer, buf);
  }
  for (int peer : plan.sends) round.sends.push_back({peer, mine, bytes});
  ScheduleOp op(BAGUA_OPKIND_NEIGHBOR_ALLREDUCE, fmt::format("lpdec step {} ({} floats)", step, count), std::move(s));
  run_to_completion(comm, op);  // (s is owned by op; the buffers live until op is destroyed)
  codec.decompress_accumulate(mine, count, self);
  for (auto& [peer, buf] : theirs) codec.decompress_accumulate(buf, count, slice.neighbours.at(peer));
  std::memcpy(x, self, count * sizeof(float));
}

LowPrecisionDecentralized::LowPrecisionDecentralized(Comm& comm, size_t count, const Codec& codec, const float* initial)
    : comm_(comm), count_(count), codec_(codec), self_(initial, initial + count) {
  if (codec.error_feedback()) error_.assign(count, 0.0f);
  for (int peer : lpdec_neighbours(comm)) neighbours_[peer].resize(count);
  lpdec_exchange_initial(comm, slice());
}

LpdecSlice LowPrecisionDecentralized::slice() {
  LpdecSlice s;
  s.count = count_;
  s.self = self_.data();
  for (auto& [peer, replica] : neighbours_) s.neighbours[peer] = replica.data();
  s.error = error_.empty() ? nullptr : error_.data();
  return s;
}

void LowPrecisionDecentralized::step(float* x) { lpdec_step(comm_, codec_, slice(), steps_++, x); }

const std::vector<float>& LowPrecisionDecentralized::replica(int which) const {
  if (which == 0 || comm_.size() == 1) return self_;
  int n = comm_.size();
  int peer = which < 0 ? (comm_.rank() + n - 1) % n : (comm_.rank() + 1) % n;
  return neighbours_.at(peer);
}

}  // namespace bagua

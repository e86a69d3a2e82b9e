#include "algorithms/gossip/neighbor_allreduce.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "algorithms/dispatch.h"
#include "algorithms/schedule.h"
#include "core/tags.h"
#include "kernels/dtype.h"

namespace bagua {
namespace {

// out = self_weight * self + sum_k weights[k] * inputs[k], in T's precision, in that order. out may be self.
template <typename T>
void weighted_sum(T* out, const T* self, double self_weight, const std::vector<const T*>& inputs,
                  const std::vector<double>& weights, size_t count) {
  const T ws = static_cast<T>(self_weight);
  for (size_t i = 0; i < count; ++i) out[i] = ws * self[i];
  for (size_t k = 0; k < inputs.size(); ++k) {
    const T w = static_cast<T>(weights[k]);
    const T* in = inputs[k];
    for (size_t i = 0; i < count; ++i) out[i] += w * in[i];
  }
}

void weighted_sum_typed(bagua_datatype_t dtype, void* out, const void* self, double self_weight,
                        const std::vector<const uint8_t*>& inputs, const std::vector<double>& weights, size_t count) {
  if (dtype == BAGUA_FLOAT64) {
    std::vector<const double*> in;
    for (auto* p : inputs) in.push_back(reinterpret_cast<const double*>(p));
    weighted_sum(static_cast<double*>(out), static_cast<const double*>(self), self_weight, in, weights, count);
  } else {
    std::vector<const float*> in;
    for (auto* p : inputs) in.push_back(reinterpret_cast<const float*>(p));
    weighted_sum(static_cast<float*>(out), static_cast<const float*>(self), self_weight, in, weights, count);
  }
}

// Gossip among `members` (rank of graph node i = members[i]): adds the graph's phases as rounds to s (every
// rank the same number); `input` is what this node sends, `output` receives the weighted sum.
void gossip_rounds(Schedule& s, const Topology& topology, const std::vector<int>& members, int node, uint64_t step,
                   const void* input, void* output, size_t count, bagua_datatype_t dtype) {
  const int phases = topology.plan(0, step).phases;  // the same on every node
  const size_t first = s.rounds().size();
  for (int k = 0; k < phases; ++k) s.round();
  if (node < 0) return;
  auto phase = [&s, first](int k) -> Round& { return s.rounds()[first + k]; };
  const size_t bytes = count * datatype_size(dtype);
  NeighborPlan plan = topology.plan(node, step);
  std::vector<const uint8_t*> inputs;
  std::vector<double> weights;
  for (size_t k = 0; k < plan.receives.size(); ++k) {
    auto [from, weight] = plan.receives[k];
    uint8_t* buf = s.scratch(bytes);
    add_recv_pieces(phase(plan.receive_phase[k]).recvs, members[from], buf, bytes);
    inputs.push_back(buf);
    weights.push_back(weight);
  }
  for (size_t k = 0; k < plan.sends.size(); ++k)
    add_send_pieces(phase(plan.send_phase[k]).sends, members[plan.sends[k]], input, bytes);
  double self_weight = plan.self_weight;
  s.then(call_step([=] { weighted_sum_typed(dtype, output, input, self_weight, inputs, weights, count); }));
}

std::unique_ptr<Operation> build_neighbor_schedule(Comm& comm, const Topology& topology, const NeighborArgs& a,
                                                   const ScheduleContext& ctx) {
  auto s = std::make_unique<Schedule>(ctx);
  std::string description =
      fmt::format("neighbor_allreduce #{} ({} x {}, {}{}, step {})", ctx.sequence, a.count, datatype_name(a.dtype),
                  topology.describe(), topology.hierarchical ? ", hierarchical" : "", a.step);
  const size_t bytes = a.count * datatype_size(a.dtype);
  auto finished = [&] {
    auto op = std::make_unique<ScheduleOp>(BAGUA_OPKIND_NEIGHBOR_ALLREDUCE, description, std::move(s));
    op->set_algorithm("neighbor_allreduce", topology.name(topology.hierarchical));
    return op;
  };
  if (a.count == 0) return finished();
  if (!topology.hierarchical) {
    std::vector<int> members(comm.size());
    for (int r = 0; r < comm.size(); ++r) members[r] = r;
    gossip_rounds(*s, topology, members, comm.rank(), a.step, a.sendbuf, a.recvbuf, a.count, a.dtype);
    return finished();
  }
  // Hierarchical: node h of the graph is host h, represented by its first rank.
  std::vector<int> leaders;
  for (const auto& host : comm.hosts()) leaders.push_back(host.front());
  const auto& mine = comm.hosts()[comm.host_of(comm.rank())];
  const bool leader = mine.front() == comm.rank();
  const int node = leader ? comm.host_of(comm.rank()) : -1;
  const int local = static_cast<int>(mine.size());
  Round& gather = s->round();
  uint8_t* host_avg = leader ? s->scratch(bytes) : nullptr;
  if (leader) {
    std::vector<const uint8_t*> peers;
    for (int k = 1; k < local; ++k) {
      uint8_t* buf = s->scratch(bytes);
      gather.recvs.push_back({mine[k], buf, bytes});
      peers.push_back(buf);
    }
    std::vector<double> ones(peers.size(), 1.0);
    const void* self = a.sendbuf;
    size_t count = a.count;
    bagua_datatype_t dtype = a.dtype;
    gather.after.push_back(call_step([=] {  // sum in order, then divide: the host average
      weighted_sum_typed(dtype, host_avg, self, 1.0, peers, ones, count);
      if (dtype == BAGUA_FLOAT64) {
        auto* v = reinterpret_cast<double*>(host_avg);
        for (size_t i = 0; i < count; ++i) v[i] /= local;
      } else {
        auto* v = reinterpret_cast<float*>(host_avg);
        for (size_t i = 0; i < count; ++i) v[i] /= static_cast<float>(local);
      }
    }));
  } else {
    gather.sends.push_back({mine.front(), a.sendbuf, bytes});
  }
  gossip_rounds(*s, topology, leaders, node, a.step, host_avg, a.recvbuf, a.count, a.dtype);
  Round& spread = s->round();
  if (leader) {
    for (int k = 1; k < local; ++k) spread.sends.push_back({mine[k], a.recvbuf, bytes});
  } else {
    spread.recvs.push_back({mine.front(), a.recvbuf, bytes});
  }
  return finished();
}

}  // namespace

CallDetails neighbor_details(const Topology& topology, size_t count, uint64_t step) {
  uint64_t h = mix_details(step, topology.hierarchical);
  return {count, mix_details(h, hash_name(topology.describe().c_str()))};
}

std::unique_ptr<Operation> build_neighbor_allreduce(Comm& comm, const Topology& topology, const NeighborArgs& a,
                                                    const ScheduleContext* taken) {
  ScheduleContext ctx =
      taken ? *taken
            : make_context(comm, TagKind::kNeighbor, a.dtype, BAGUA_SUM, neighbor_details(topology, a.count, a.step));
  // (With `taken`, the device proxy builds it inside the engine's pass, whose failure handling fails the
  // communicator.)
  if (taken) return build_neighbor_schedule(comm, topology, a, ctx);
  return after_sequence_taken(comm, "neighbor_allreduce",
                              [&] { return build_neighbor_schedule(comm, topology, a, ctx); });
}

}  // namespace bagua

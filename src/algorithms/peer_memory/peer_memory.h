// One-host algorithms that work on the peers' buffers themselves: cross-memory attach (process_vm_readv/writev) on
// host memory, CUDA IPC mappings on device memory (docs/algorithms.md, docs/cuda.md). Each collective gives a plan,
// which spans of which ranks' buffers this rank copies or reduces into which; this file runs the protocol they all
// share, and the plan on either memory.
//
// Round 0: every rank tells every peer its pid, buffer addresses and sizes, its call (collective, count, datatype,
// op, root; for alltoall(v) where its block for that peer starts and how long it is) and where its buffers live:
// host memory, or device memory with IPC handles, its GPU and the GPUs it reaches. Every rank decides from the same
// facts: IPC is possible if every rank with buffers is on device memory CUDA IPC exports, every such rank's GPU
// reaches every other's, and ranks of one process share their GPU.
// Round 1 (IPC possible): each rank maps the peers' buffers its plan touches and votes whether that worked; one
//   "no" and every rank stages.
// Round 2 (staged): ranks on device memory copy their buffers to staging and tell the peers its addresses; the plan
//   then runs on host memory, by cross-memory attach.
// Then each rank runs its plan (IPC: on the device operation's stream), and round 3 says "done" to every peer once
// its own reads and writes have finished; after it nobody touches this rank's buffers.
//
// The plan is the same on either path, so the IPC path, the staged path and host memory give the same bits.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "algorithms/collective_args.h"
#include "algorithms/cost_model.h"
#include "algorithms/registry.h"
#include "algorithms/schedule.h"
#include "core/operation.h"

namespace bagua {

class DeviceOperation;

enum class PeerBufferKind : uint8_t { kSend, kRecv };

// A place in rank `rank`'s send or receive buffer, `offset` bytes from its start.
struct PeerSpan {
  int rank;
  PeerBufferKind buffer;
  size_t offset;
};

struct PeerCopy {
  PeerSpan to, from;
  size_t bytes;
};

// destinations[0] = sources[0] op sources[1] op ... left to right (rounded after each step; divided by the number of
// ranks for avg), then copied into the other destinations. `count` elements of the call's datatype. On device memory
// the result builds up in destinations[0] itself, so only sources[0] may overlap it (in place).
struct PeerReduce {
  std::vector<PeerSpan> sources, destinations;
  size_t count;
};

// What one rank does. A rank reads or writes a peer's buffer only where its plan says so, and only one rank writes
// any byte; in place is safe when whoever writes a span is also the only one who reads it (reductions) or nobody
// reads it (copies into place).
struct PeerPlan {
  std::vector<PeerCopy> copies;
  std::vector<PeerReduce> reductions;
  void copy(PeerSpan to, PeerSpan from, size_t bytes) {
    if (bytes > 0) copies.push_back({to, from, bytes});
  }
};

// What a plan is built from. For alltoall(v), what each rank q sends this one (from q's own call): where it starts
// in q's sendbuf, in bytes, and how many bytes.
struct PeerCallFacts {
  int rank;
  int nranks;
  const CollectiveArgs& args;
  std::vector<size_t> offset_for_me, bytes_for_me;
};
using PeerPlanBuilder = PeerPlan (*)(const PeerCallFacts& call);

// Each collective's plan (in its folder; declared here for the unit test of their rules).
PeerPlan allreduce_peer_plan(const PeerCallFacts& call);
PeerPlan reduce_scatter_peer_plan(const PeerCallFacts& call);
PeerPlan allgather_peer_plan(const PeerCallFacts& call);
PeerPlan broadcast_peer_plan(const PeerCallFacts& call);
PeerPlan reduce_peer_plan(const PeerCallFacts& call);
PeerPlan alltoall_peer_plan(const PeerCallFacts& call);  // alltoall and alltoallv
PeerPlan gather_peer_plan(const PeerCallFacts& call);
PeerPlan scatter_peer_plan(const PeerCallFacts& call);

// The schedule of a call; device: the device operation of a call on device memory (args holds its device buffers).
std::unique_ptr<Schedule> peer_memory_schedule(const CollectiveArgs& args, const ScheduleContext& ctx,
                                               PeerPlanBuilder plan, DeviceOperation* device);

// AlgorithmEntry::build and build_on_device for a plan.
template <PeerPlan (*Plan)(const PeerCallFacts&)>
std::unique_ptr<Operation> run_peer_memory(const CollectiveArgs& args, const ScheduleContext& ctx,
                                           std::string description) {
  return std::make_unique<ScheduleOp>(opkind_of(args.collective), std::move(description),
                                      peer_memory_schedule(args, ctx, Plan, nullptr));
}
template <PeerPlan (*Plan)(const PeerCallFacts&)>
std::unique_ptr<Operation> run_peer_memory_on_device(const CollectiveArgs& args, DeviceOperation& device,
                                                     const ScheduleContext& ctx, std::string description) {
  return std::make_unique<ScheduleOp>(opkind_of(args.collective), std::move(description),
                                      peer_memory_schedule(args, ctx, Plan, &device));
}

// AlgorithmEntry::supports: one host.
bool peer_memory_supports(int nranks, const HostLayout& hosts);

// The late words (kernels/late_span.h) a call on the caller's stream keeps in its staging for n ranks.
size_t peer_memory_late_words(int nranks);

// A collective's registry row "peer_memory": one host, cross-memory attach, the plan on either memory.
template <PeerPlan (*Plan)(const PeerCallFacts&)>
constexpr AlgorithmEntry peer_memory_algorithm(Collective collective, double (*cost)(const CostTerms&)) {
  return {collective, "peer_memory", peer_memory_supports,           cost, run_peer_memory<Plan>,
          true,       false,         run_peer_memory_on_device<Plan>};
}

// Modelled time of a plan on host memory: the hello and done rounds plus `setup_us`, then `spans` copies of
// `span_bytes` each from or into peers (the busiest rank's), in 256 KiB process_vm_readv/writev calls, and `reduced`
// bytes of input reduced.
double peer_memory_cost(const CostTerms& t, double spans, double span_bytes, double reduced, double setup_us);
inline double peer_memory_cost(const CostTerms& t, double spans, double span_bytes, double reduced = 0) {
  return peer_memory_cost(t, spans, span_bytes, reduced, t.model.peer_memory_setup_us);
}

}  // namespace bagua

// The algorithm registry: one row per (collective, algorithm), each defined in its own file under the
// collective's folder (allreduce/ring.cc, ...) and listed once in registry.cc. Selection, BAGUA_ALGO, the
// dispatcher and bagua-info read only this table. Adding an algorithm: one file, and its row in registry.cc.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "algorithms/collective_args.h"
#include "algorithms/cost_model.h"
#include "algorithms/schedule.h"
#include "core/operation.h"

namespace bagua {

class DeviceOperation;

struct AlgorithmEntry {
  Collective collective;
  const char* name;  // as BAGUA_ALGO and the logs spell it: "ring"
  // Whether it can run on nranks ranks laid out as hosts; nullptr: on any communicator.
  bool (*supports)(int nranks, const HostLayout& hosts);
  // Modelled time of one call in microseconds (cost_model.h); ties go to the earlier row.
  double (*cost_us)(const CostTerms& terms);
  // The operation for a call (arguments already checked; ctx carries the sequence number).
  std::unique_ptr<Operation> (*build)(const CollectiveArgs& args, const ScheduleContext& ctx, std::string description);
  // Usable only when every rank of a host can read and write its peers' memory (the init-time probe).
  bool needs_cross_memory = false;
  // Uses the communicator's shared segments: the dispatcher gives each call its turn (ScheduleContext).
  bool uses_shared_segments = false;
  // For a call on device memory within one host: the operation that works on the device buffers itself, and
  // takes staging from `device` (DeviceOperation::take_staging) only when the ranks find they must. nullptr: the
  // dispatcher stages the call and runs `build` on the staging memory.
  std::unique_ptr<Operation> (*build_on_device)(const CollectiveArgs& args, DeviceOperation& device,
                                                const ScheduleContext& ctx, std::string description) = nullptr;
};

// A row of the registry; never null once chosen.
using Algorithm = const AlgorithmEntry*;

// The rows of collective c, in table order.
const std::vector<Algorithm>& algorithms_of(Collective c);
// The row named `name` for c, or nullptr.
Algorithm find_algorithm(Collective c, std::string_view name);
inline const char* algorithm_name(Algorithm a) { return a->name; }
// Whether `a` can run on nranks ranks laid out as hosts (e.g. recursive doubling allgather needs a power of two;
// hierarchical algorithms need several hosts; the rail allreduce needs as many ranks on each).
bool algorithm_supports(Algorithm a, int nranks, const HostLayout& hosts = {});

// Wraps a Schedule builder as an AlgorithmEntry::build.
template <std::unique_ptr<Schedule> (*Build)(const CollectiveArgs&, const ScheduleContext&)>
std::unique_ptr<Operation> run_schedule(const CollectiveArgs& args, const ScheduleContext& ctx,
                                        std::string description) {
  return std::make_unique<ScheduleOp>(opkind_of(args.collective), std::move(description), Build(args, ctx));
}

}  // namespace bagua

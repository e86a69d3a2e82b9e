// The dispatcher: the one path from a call to an operation. Every collective, whether from the C API, from the
// library itself (gossip set-up, lpdec, the async averager) or from a relaxation, goes through here:
//   check the arguments (no side effect) -> take the sequence number -> choose the algorithm -> build the context
//   -> build the operation.
// Posting and waiting are the caller's (the C API's requests and groups, or run_to_completion).
#pragma once

#include <functional>
#include <memory>

#include "algorithms/collective_args.h"
#include "algorithms/schedule.h"
#include "algorithms/selection.h"
#include "core/comm.h"
#include "core/operation.h"

namespace bagua {

class DeviceOperation;

// Checks `args` for its collective against this communicator; throws INVALID_ARGUMENT (NOT_SUPPORTED for device
// memory) with no side effect. The dispatcher calls it; the relaxations call it for their own buffers.
void check_collective_args(const Comm& comm, CollectiveArgs& args);

// The buffers of an allreduce-shaped relaxation (count elements in and out, in place when equal), on either
// memory: host memory, or device memory of one device (mixing them is INVALID_ARGUMENT).
struct RelaxationBuffers {
  const void* sendbuf = nullptr;
  void* recvbuf = nullptr;
  size_t bytes = 0;
  bool on_device = false;
  int device = -1;
};
RelaxationBuffers check_relaxation_buffers(const Comm& comm, const void* sendbuf, void* recvbuf, size_t count,
                                           bagua_datatype_t dtype);
// A relaxation on device memory, stream-ordered on `stream` like a collective: its buffers are staged through
// pinned memory and its sequence number is taken now (context of tag kind, dtype, op); the communicator's proxy
// calls build(staged send, staged recv, context) once the stream has reached the call and the input is staged
// (so calls ordered on one stream build one after the other: a qstate's scratch serves one at a time).
using RelaxationBuilder = std::function<std::unique_ptr<Operation>(const void*, void*, const ScheduleContext&)>;
std::unique_ptr<Operation> make_device_relaxation(Comm& comm, bagua_opkind_t kind, const RelaxationBuffers& buffers,
                                                  void* stream, TagKind tag_kind, bagua_datatype_t dtype,
                                                  bagua_redop_t op, CallDetails details, const char* name,
                                                  RelaxationBuilder build);
// A relaxation that runs its own kernels on device memory (the quantized allreduce): no copies in or out, only
// `staging_bytes` of mapped staging for what crosses the wire and `device_scratch_bytes` of device memory.
// - on_caller_stream (BAGUA_DEVICE_DATA_PATH=stream): build(operation, context) runs on the calling thread once the
//   staging is taken, and sets the operation's phases (DeviceOperation::compute_on_caller_stream), which are
//   enqueued on the caller's stream at the call; the scratch is ordered on that stream.
// - else: build runs on the proxy once the stream has reached the call, and launches its work through the operation
//   (issue_work) on the proxy's stream.
// build is kept until the operation is freed.
using DeviceRelaxationBuilder = std::function<std::unique_ptr<Operation>(DeviceOperation&, const ScheduleContext&)>;
std::unique_ptr<Operation> make_device_computed_relaxation(
    Comm& comm, bagua_opkind_t kind, const RelaxationBuffers& buffers, void* stream, size_t staging_bytes,
    size_t device_scratch_bytes, bool on_caller_stream, TagKind tag_kind, bagua_datatype_t dtype, bagua_redop_t op,
    CallDetails details, const char* name, DeviceRelaxationBuilder build);

// The context of the next operation on comm: takes its sequence number, so build nothing that can fail after.
// details: what else every rank's call must agree on; it enters the call's fingerprint (core/tags.h).
ScheduleContext make_context(Comm& comm, TagKind kind, bagua_datatype_t dtype, bagua_redop_t op, CallDetails details);
// For work after this rank took a sequence number (make_context) that its peers expect it to use: a failure there
// (out of memory) leaves it out of step with them, so it fails the communicator (fail_now) and rethrows.
void fail_out_of_step(Comm& comm, const char* what);  // from inside a catch block
template <typename F>
auto after_sequence_taken(Comm& comm, const char* what, F&& work) -> decltype(work()) {
  try {
    return work();
  } catch (...) {
    fail_out_of_step(comm, what);
    throw;
  }
}
// The details of a collective call: its count (but alltoallv's, which differ by rank), root and algorithm.
CallDetails collective_details(const CollectiveArgs& args, const char* algorithm);

// Parses the configuration's BAGUA_ALGO rules; INVALID_USAGE naming BAGUA_ALGO when they do not. Init calls it
// before the rendezvous.
void check_algorithm_rules(const Config& config);

// The selector of comm (BAGUA_ALGO rules, cost model, cross-memory verdict), made on first use.
const AlgorithmSelector& selector_of(Comm& comm);
// Makes comm's selector and runs its choice once for every collective over the range of sizes, so that the first
// operations do not pay for parsing the rules and for the first use of this code and libm's tables (about 150 us
// on the development VM). The API layer calls it once a communicator is made. The shared-copy factor is measured
// (algorithms/calibration.h), or, for a split with every rank of its parent (`parent`, the same processes on the
// same cores), taken from the parent: about a third of such a split's time on the 2-core VM.
void prepare_selection(Comm& comm, Comm* parent = nullptr);

// A collective call: checks, sequence number, algorithm, operation. `suffix` ends its description (", internal").
// Device buffers give a stream-ordered operation on args.stream (core/device_proxy.h) for the caller to submit.
std::unique_ptr<Operation> make_collective(Comm& comm, CollectiveArgs args, const char* suffix = "");
// Point-to-point: the k-th send from A to B matches the k-th receive on B from A.
// On device memory they are stream-ordered on `stream` (Operation::on_device()).
std::unique_ptr<Operation> make_send(Comm& comm, const void* buf, size_t count, bagua_datatype_t dtype, int peer,
                                     void* stream = nullptr);
std::unique_ptr<Operation> make_recv(Comm& comm, void* buf, size_t count, bagua_datatype_t dtype, int peer,
                                     void* stream = nullptr);

// Starts op and waits for it; throws its error. The communicator forgets it either way.
void run_to_completion(Comm& comm, Operation& op);
// A blocking allreduce for the library's own use (arguments trusted, still checked).
void allreduce_now(Comm& comm, const void* sendbuf, void* recvbuf, size_t count, bagua_datatype_t dtype,
                   bagua_redop_t op);

}  // namespace bagua

// Quantized allreduce (docs/relaxations.md): scatter-reduce-allgather in which every block that crosses the
// wire is compressed. Rank g of the exchange group owns block g: the others send it their compressed copy of
// block g (an alltoall), the owner adds them to its own full-precision block in fp32, recompresses the sum
// and sends it to all (an allgather); everyone, the owner included, decompresses the same bytes, so outputs
// are bit-identical. Hierarchical forms: the rail form (every host has L ranks) splits the vector into L slices;
// the ranks of a host first sum each slice at full precision at the slice's rank (local index l), the ranks with
// local index l on every host run the algorithm on slice l, and each sends its slice of the result, compressed, to
// its host, where every rank decompresses it. The leader form (hosts of different sizes): the group is one leader
// per host, which sums its host's inputs at full precision first and sends them the result at the end.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include "algorithms/quantized/codec.h"
#include "algorithms/schedule.h"
#include "core/comm.h"
#include "core/device_proxy.h"
#include "core/operation.h"

namespace bagua {

// Who exchanges compressed blocks, and this rank's part in it. A pure function of (comm, codec).
struct QuantizedGroup {
  bool hierarchical = false;
  bool rail = false;             // hierarchical, every host with local_size ranks: one group per local index
  std::vector<int> members;      // ranks exchanging compressed blocks, ascending
  int index = -1;                // this rank's position in members, -1 if it only talks to its leader
  int leader = 0;                // this rank's host leader (itself when not hierarchical or rail)
  std::vector<int> local_peers;  // leader (or any rank, rail): the other ranks of its host, ascending
  int local_index = 0;           // rail: this rank's place in its host, the slice its group exchanges
  int local_size = 1;            // rail: ranks per host, the number of slices

  // hierarchical: ON, or AUTO when the communicator spans hosts, some host has several ranks and the format sends
  // at least CostModel::quantized_hierarchical_min_bits per element.
  static QuantizedGroup of(const Comm& comm, const Codec& codec);
  // The part of the vector that the group exchanges: slice local_index of local_size (all of it unless rail).
  size_t slice_begin(size_t count) const;
  size_t slice_count(size_t count) const;
  size_t slice_begin_of(size_t count, int local) const;
  size_t slice_count_of(size_t count, int local) const;
  // Block b of the slice, which members[b] owns.
  size_t block_offset(size_t count, int b) const;
  size_t block_count(size_t count, int b) const;
  // Block b of slice `local` (rail: another local rank's slice).
  size_t block_offset_in(size_t count, int local, int b) const;
  size_t block_count_in(size_t count, int local, int b) const;
};

// Error-feedback buffers, scratch and step counter of one tensor (bagua_qstate_t).
class QuantizedState {
 public:
  QuantizedState(const Comm& comm, size_t count, bagua_datatype_t dtype, const Codec& codec);
  // Error feedback in the caller's count floats, one residual per element: the worker error on the blocks other
  // ranks own and the owner error on this rank's block share the array, so what it holds does not depend on the
  // block layout (the bucket scheduler re-buckets it). first_step numbers the stochastic draws.
  QuantizedState(const Comm& comm, size_t count, bagua_datatype_t dtype, const Codec& codec, float* shared_error,
                 uint64_t first_step);
  ~QuantizedState();
  QuantizedState(const QuantizedState&) = delete;
  QuantizedState& operator=(const QuantizedState&) = delete;
  // Whether this rank compresses with error feedback (false for a hierarchical non-leader: its input reaches its
  // leader at full precision).
  bool uses_error_feedback() const { return worker_error_ptr_ != nullptr; }
  // Throws INVALID_ARGUMENT unless the call matches what the state was created for; INVALID_USAGE while an
  // operation uses it (check_busy: host calls; a device call is checked when its operation is built).
  void check_matches(const Comm& comm, size_t count, bagua_datatype_t dtype, const Codec& codec,
                     bool check_busy = true) const;
  void residual(float* out) const;  // (after residual_to_host)
  size_t count() const { return count_; }
  // Calls that compress on the device keep the error feedback in device memory: the first moves it there, a call
  // that compresses on the host (or bagua_qstate_residual) moves it back. Copies run on the state's own stream of
  // that device. Throws SYSTEM when out of device memory, CUDA or TIMEOUT when a copy fails.
  void residual_to_device(int device);
  void residual_to_host();
  // Allocates the device copy on `device` (no copy): lets a call fail at the call, with no side effect, when out of
  // device memory. Only while no call uses the state.
  void reserve_device(int device);
  // The error feedback is the caller's array (the bucket scheduler's form): it stays in host memory.
  bool shares_error() const { return shares_error_; }

  const QuantizedGroup& group() const { return group_; }
  // Where the error feedback is now (device memory after residual_to_device).
  float* worker_error() { return on_device_ ? device_error_ : worker_error_ptr_; }
  float* owner_error() { return on_device_ ? device_error_ + count_ : owner_error_ptr_; }
  uint64_t next_step() { return step_++; }
  std::vector<uint8_t>& scratch() { return scratch_; }
  std::atomic<bool> busy{false};  // an operation using this state is in flight (cleared by whichever thread frees it)
  std::atomic<int> queued{0};     // device calls enqueued with this state and not yet freed
  // Of those, the calls that compress on their caller's stream (its error feedback in device memory, ordered by that
  // stream), and the stream: its handle, device and (the per-thread default stream) thread. A call's release
  // decrements queued first: queued <= queued_on_stream means that only such calls are in flight.
  std::atomic<int> queued_on_stream{0};
  void* queued_stream = nullptr;
  int queued_device = -1;
  std::thread::id queued_thread;

 private:
  const Comm* comm_;
  size_t count_;
  bagua_datatype_t dtype_;
  Codec codec_;
  QuantizedGroup group_;
  std::vector<float> worker_error_;    // count floats; this rank's own block stays zero
  std::vector<float> owner_error_;     // this rank's block
  float* worker_error_ptr_ = nullptr;  // worker_error_, or the caller's shared array
  float* owner_error_ptr_ = nullptr;   // owner_error_, or the shared array at this rank's block
  std::vector<uint8_t> scratch_;
  uint64_t step_ = 0;
  bool shares_error_ = false;
  // Device copy of the error feedback: count worker floats, then the owner's block (stream-ordered memory of
  // copy_stream_).
  int timeout_ms_ = 0;  // the communicator's, kept: the state may outlive it
  float* device_error_ = nullptr;
  int device_ = -1;
  void* copy_stream_ = nullptr;
  bool on_device_ = false;
};

struct QuantizedArgs {
  const void* sendbuf;
  void* recvbuf;
  size_t count;
  bagua_datatype_t dtype;
  bagua_redop_t op;  // SUM or AVG
};

// The fingerprint details of a quantized allreduce (dispatch.h's make_context): count, format, chunk and
// hierarchical mode.
CallDetails quantized_details(size_t count, const Codec& codec);

// Whether a call on device memory compresses on the device (docs/cuda.md): above the full-precision size, with a
// state that keeps its own error feedback (not the bucket scheduler's). Otherwise it is staged and compresses on
// the host. Either way the messages and results are the same, so ranks need not agree on it.
bool compresses_on_device(const Comm& comm, const QuantizedArgs& args, const QuantizedState* state);
// Whether the call can compress on its caller's stream (BAGUA_DEVICE_DATA_PATH=stream): where this rank exchanges
// compressed blocks with at least one other (flat and rail forms, a leader of the leader form).
bool compresses_on_caller_stream(const Comm& comm, const Codec& codec, const QuantizedState* state);
// What such a call needs: mapped staging for what crosses the wire (compressed blocks; in the hierarchical forms the
// host's inputs and the full-precision input and output), and device memory for fp32 copies (of fp16/bf16 inputs,
// of the host's sum).
struct QuantizedDeviceMemory {
  size_t staging = 0;
  size_t device = 0;
};
QuantizedDeviceMemory quantized_device_memory(const Comm& comm, const QuantizedArgs& args, const Codec& codec);

// Builds the operation (arguments already validated). state may be NULL (no error feedback). taken: a context
// whose sequence number the caller took already (the device path), else one is taken here. device: the call
// compresses on the device (compresses_on_device), with its scratch in the operation's staging.
std::unique_ptr<Operation> build_quantized_allreduce(Comm& comm, const QuantizedArgs& args, const Codec& codec,
                                                     QuantizedState* state, const ScheduleContext* taken = nullptr,
                                                     DeviceOperation* device = nullptr);

}  // namespace bagua

// The bucket scheduler (bagua_scheduler_t): BAGUA's execution optimizer as a library object. The caller's thread
// registers tensors and marks them ready; the scheduler's own thread, on its own split of the communicator,
// runs each bucket once all its tensors are marked, in bucket order on every rank, and the caller's wait
// returns when the step's buckets are done. Per-tensor state (error-feedback residuals, QAdam momentum,
// low-precision replicas) lives in arrays indexed by tensor element, so a new bucket size carries it over.
#pragma once

#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "algorithms/gossip/topology.h"
#include "algorithms/quantized/codec.h"
#include "algorithms/quantized/quantized_allreduce.h"
#include "algorithms/scheduler/bucket_plan.h"
#include "core/comm.h"
#include "kernels/device_runtime.h"

namespace bagua {

struct SchedulerConfig {
  bagua_bucket_algorithm_t algorithm = BAGUA_BUCKET_ALLREDUCE;
  bagua_redop_t op = BAGUA_AVG;
  bagua_compression_t compression{};  // its hierarchical field is the scheduler's to set
  size_t bucket_bytes = 4 << 20;
  bool autotune = true;
  bagua_hierarchical_t hierarchical = BAGUA_HIERARCHICAL_AUTO;
  bagua_topology_kind_t topology = BAGUA_TOPO_ONE_PEER_EXPONENTIAL;
  int warmup_steps = 100;
  float beta1 = 0.9f;

  bool weight_algorithm() const {
    return algorithm == BAGUA_BUCKET_DECENTRALIZED || algorithm == BAGUA_BUCKET_LOW_PRECISION_DECENTRALIZED;
  }
};

struct SchedulerInfo {
  uint64_t steps = 0;
  uint64_t bucket_bytes = 0;
  int buckets = 0;
  bool hierarchical = false;
  bool tuning = false;
  bool settled = false;
  uint64_t decisions = 0;
  double step_ms = 0;
  uint64_t bytes_sent = 0;
};

class BucketScheduler {
  enum class Mark : uint8_t { kNone, kReady, kUnused };

 public:
  // comm: the scheduler's own communicator (a split of the caller's); config already checked.
  BucketScheduler(std::unique_ptr<Comm> comm, const SchedulerConfig& config);
  ~BucketScheduler();

  // Collective, once. Throws INVALID_USAGE naming the first tensor whose count or dtype differs across ranks.
  // device >= 0: the tensors are device memory of that device (all of them; the caller checked).
  void register_tensors(const std::vector<void*>& tensors, const std::vector<TensorSpec>& specs, int device);
  // event: for device tensors, the caller's cudaEvent_t after which the tensor is ready (NULL: the legacy
  // default stream's work enqueued so far); must be NULL for host tensors.
  void mark_ready(int tensor, void* event) { mark(tensor, Mark::kReady, event); }
  void mark_unused(int tensor) { mark(tensor, Mark::kUnused, nullptr); }
  void skip_step();
  // Host tensors: waits for the step. Device tensors: makes `stream` wait for it and returns (the caller may
  // mark the next step meanwhile). Throws the first error of this or an earlier step (and so does every later call).
  void wait(DeviceStream stream);
  void set_bucket_bytes(size_t bytes);
  SchedulerInfo info();
  void residual(int tensor, float* out, size_t count);
  // Marked but not waited for.
  bool step_in_flight();
  // Waits (bounded) until the thread has finished every step waited for.
  void drain();
  bool failed();

 private:
  struct Tensor {
    void* data = nullptr;
    size_t bytes = 0;
    TensorSpec spec;
    uint8_t* staged = nullptr;  // device tensors: its place in the staging, the same for every bucket layout
  };
  // The marks of one step. Two slots: with device tensors the caller may mark step g + 1 while the thread
  // still runs step g.
  struct StepSlot {
    std::vector<Mark> marks;
    bool open = false;  // a mark or a skip since the slot was cleared
    bool skipped = false;
    void clear(size_t tensors) {
      marks.assign(tensors, Mark::kNone);
      open = skipped = false;
    }
  };
  // Page-locked host memory (device tensors are staged through it).
  struct MappedBuffer {
    void* data = nullptr;
    MappedBuffer() = default;
    MappedBuffer(const MappedBuffer&) = delete;
    MappedBuffer& operator=(const MappedBuffer&) = delete;
    ~MappedBuffer() {
      if (data) device_runtime().free_mapped(data);
    }
  };
  struct Bucket {
    BucketSpec spec;
    uint8_t* in_place = nullptr;  // the tensors lie back to back in memory: communicate them where they are
    std::vector<uint8_t> flat;    // otherwise they are copied here and back
    std::unique_ptr<QuantizedState> qstate;
  };
  enum class Hierarchy { kAuto, kFlat, kHierarchical };

  void mark(int tensor, Mark kind, void* event);
  void run();
  void run_step(StepSlot& slot);
  void finish_step(bool skipped);
  void publish_done(uint32_t value);
  // A caller's enqueue failed: fails the scheduler and releases the waiting streams.
  void fail_and_release(const Error& error);
  // Blocks (bounded by the step's timeouts) until pred() holds or the scheduler failed.
  template <typename Pred>
  void wait_for_thread(std::unique_lock<std::mutex>& lock, Pred pred);
  void record_failure(bagua_status_t status, const std::string& message);  // under mutex_
  void check_same_settings();  // collective: the settings that decide the calls, equal on every rank
  void decide_if_due();
  void apply_layout(size_t bucket_bytes, Hierarchy hierarchy);
  void run_bucket(Bucket& b, StepSlot& slot);
  // Device tensors. The caller's thread, at a mark: on the scheduler's stream, after the previous step's copies
  // back and the tensor's readiness, the copy into its staging, then its staged word.
  void stage_at_mark(int tensor, Mark kind, void* event, uint32_t step_word);
  // The caller's thread, at wait: on the waited stream, after the step, the copies back.
  void copy_back_at_wait(DeviceStream stream, uint64_t step, bool skipped);
  // The scheduler's thread: waits (host memory only) until the bucket's tensors are staged for this step.
  void await_staged(const Bucket& b);
  uint8_t* staged_data(const Bucket& b) const { return tensors_[b.spec.tensors.front()].staged; }
  void allreduce_bucket(void* data, size_t count, bagua_datatype_t dtype, bagua_redop_t op);
  void quantized_bucket(Bucket& b, void* data, bagua_redop_t op);
  bool bucket_ready(const Bucket& b, const StepSlot& slot) const;
  void check_tensor(int tensor, const char* what) const;
  void check_step_not_finished(const char* what) const;
  [[noreturn]] void throw_failure() const;
  bool hierarchy_applies() const;
  const char* allreduce_algorithm() const;
  Codec codec() const;

  std::unique_ptr<Comm> comm_;
  SchedulerConfig config_;

  std::mutex mutex_;
  // Held by the caller's device marks and waits while they enqueue, outside mutex_: a CUDA call may block (a user
  // thread waiting inside the driver), and the scheduler's thread must still take mutex_ to finish the step.
  std::mutex enqueue_mutex_;
  std::condition_variable wake_;  // the scheduler's thread: marks, quit
  std::condition_variable done_;  // the caller: a step done
  bool quit_ = false;
  bool registered_ = false;
  uint64_t generation_ = 0;       // the step the caller is marking (skipped steps count)
  uint64_t done_generation_ = 0;  // steps the thread has finished
  StepSlot slots_[2];             // step g's marks are in slots_[g % 2]
  bool failed_ = false;
  bagua_status_t failure_status_ = BAGUA_ERR_INTERNAL;
  std::string failure_message_;
  std::vector<Tensor> tensors_;
  size_t pending_bucket_bytes_ = 0;  // set_bucket_bytes: applied from step pending_generation_ on
  uint64_t pending_generation_ = 0;
  // Device tensors (the scheduler's thread makes no CUDA call for them; docs/scheduler.md):
  int device_ = -1;                             // their device,
  DeviceStream stream_ = nullptr;               // the stream of the copies in, enqueued by the marks,
  std::unique_ptr<MappedBuffer> staging_;       // every tensor's staging, a region per dtype in state order,
  std::unique_ptr<MappedBuffer> staged_words_;  // per tensor, the latest step (+1) whose copy in has landed,
  std::unique_ptr<MappedBuffer> done_word_;     // and the word callers' streams wait on: steps finished.
  // Under enqueue_mutex_: an event after the latest copies back, and the step whose copies in already wait for it;
  std::shared_ptr<DeviceEvent> copied_back_;
  uint64_t copied_back_step_ = ~uint64_t{0};
  // per stream passed to a device wait, an event after its latest copies back (null while being enqueued): the
  // staging and the words are freed only once they are done;
  std::vector<std::pair<DeviceStream, std::shared_ptr<DeviceEvent>>> waited_;
  bool enqueue_failed_ = false;  // and whether a mark's or a wait's enqueue failed (then they are never freed).
  std::mutex publish_mutex_;     // publish_done's (the thread and a failing caller)

  // The scheduler's thread (and, before it starts steps, registration).
  std::vector<Bucket> buckets_;
  size_t bucket_bytes_ = 0;
  Hierarchy hierarchy_ = Hierarchy::kAuto;
  uint64_t steps_ = 0;
  std::map<bagua_datatype_t, std::vector<float>> error_;  // error feedback, per element (gradient algorithms)
  std::vector<float> momentum_;                           // QADAM, FLOAT32 tensors
  std::vector<float> replica_self_, replica_error_;       // LOW_PRECISION_DECENTRALIZED
  std::map<int, std::vector<float>> replica_neighbours_;
  Topology topology_;

  // Tuning: rank 0 decides, every rank applies what rank 0 broadcasts at the same step.
  std::unique_ptr<BucketTuner> tuner_;
  bool tuning_active_ = false;
  uint64_t next_decision_step_ = 0;
  SchedulerInfo info_;
  std::chrono::steady_clock::time_point last_done_{};  // when the previous step finished (step times)
  bool last_done_valid_ = false;

  std::thread thread_;
};

}  // namespace bagua

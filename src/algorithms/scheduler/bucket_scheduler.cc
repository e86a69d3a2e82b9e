#include "algorithms/scheduler/bucket_scheduler.h"

#include <algorithm>
#include <cstring>
#include <thread>

#include "algorithms/dispatch.h"
#include "algorithms/gossip/lpdec.h"
#include "algorithms/gossip/neighbor_allreduce.h"
#include "algorithms/registry.h"
#include "base/error.h"
#include "base/logging.h"
#include "kernels/dtype.h"

namespace bagua {
namespace {

constexpr size_t kMinTunedBucket = 64 << 10;
constexpr size_t kMaxTunedBucket = size_t{1} << 30;

size_t total_bytes_of_largest_dtype(const std::vector<TensorSpec>& specs) {
  std::map<bagua_datatype_t, size_t> bytes;
  size_t most = 0;
  for (const TensorSpec& t : specs) most = std::max(most, bytes[t.dtype] += t.count * datatype_size(t.dtype));
  return most;
}

}  // namespace

BucketScheduler::BucketScheduler(std::unique_ptr<Comm> comm, const SchedulerConfig& config)
    : comm_(std::move(comm)), config_(config) {
  bucket_bytes_ = config_.bucket_bytes;
  if (config_.hierarchical == BAGUA_HIERARCHICAL_ON) hierarchy_ = Hierarchy::kHierarchical;
  if (config_.hierarchical == BAGUA_HIERARCHICAL_OFF) hierarchy_ = Hierarchy::kFlat;
  thread_ = std::thread([this] { run(); });
}

BucketScheduler::~BucketScheduler() {
  try {
    drain();  // device steps still running after their wait
  } catch (const Error&) {
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    quit_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
  if (stream_ == nullptr) return;
  // The stream of the copies in may still wait for a caller's event (marks of a step never waited for), and the
  // callers' streams may not have passed their waits and copies back yet (destroy right after a device wait):
  // free the staging and the words only once they are done, else leave them allocated.
  bool drained = true;
  try {
    device_runtime().synchronize(stream_, comm_->config().timeout_ms);
  } catch (const Error& e) {
    BAGUA_WARN("bucket scheduler: its stream did not drain: {}", e.what());
    drained = false;
  }
  device_runtime().destroy_stream(stream_);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(comm_->config().timeout_ms);
  if (enqueue_failed_) drained = false;  // a stream may hold work of a half-enqueued call
  for (auto& [stream, passed] : waited_) {
    if (passed == nullptr) drained = false;
    try {
      while (drained && !passed->done()) {
        if (std::chrono::steady_clock::now() >= deadline) {
          BAGUA_WARN("bucket scheduler: a stream has not passed its wait and copies back");
          drained = false;
        }
        std::this_thread::sleep_for(std::chrono::microseconds(100));
      }
    } catch (const Error& e) {  // the stream failed: it will not touch them again
      BAGUA_WARN("bucket scheduler: a waited stream failed: {}", e.what());
    }
  }
  if (!drained) {
    BAGUA_WARN("bucket scheduler: its staging and words stay allocated");
    (void)done_word_.release();
    (void)staging_.release();
    (void)staged_words_.release();
  }
}

bool BucketScheduler::hierarchy_applies() const {
  if (comm_->nhosts() < 2 || comm_->nhosts() == comm_->size()) return false;
  switch (config_.algorithm) {
    case BAGUA_BUCKET_LOW_PRECISION_DECENTRALIZED: return false;
    case BAGUA_BUCKET_DECENTRALIZED:
      for (const auto& host : comm_->hosts())
        if (host.size() != comm_->hosts().front().size()) return false;
      return config_.topology != BAGUA_TOPO_SHIFT_ONE || comm_->nhosts() % 2 == 0;  // it pairs the hosts
    default: return true;
  }
}

const char* BucketScheduler::allreduce_algorithm() const {
  switch (hierarchy_) {
    case Hierarchy::kAuto: return nullptr;  // BAGUA_ALGO, then the cost model
    case Hierarchy::kFlat: return "ring";
    case Hierarchy::kHierarchical:
      return algorithm_supports(find_algorithm(Collective::kAllreduce, "hier"), comm_->size(), comm_->hosts())
                 ? "hier"
                 : "hier_leader";
  }
  return nullptr;
}

Codec BucketScheduler::codec() const {
  bagua_compression_t cfg = config_.compression;
  cfg.hierarchical = hierarchy_ == Hierarchy::kHierarchical ? BAGUA_HIERARCHICAL_ON
                     : hierarchy_ == Hierarchy::kFlat       ? BAGUA_HIERARCHICAL_OFF
                                                            : cfg.hierarchical;
  return Codec::from_config(&cfg);
}

void BucketScheduler::check_same_settings() {
  uint32_t beta1_bits;
  std::memcpy(&beta1_bits, &config_.beta1, sizeof(beta1_bits));
  const bagua_compression_t& c = config_.compression;
  const bagua_bucket_algorithm_t algo = config_.algorithm;
  const bool compressed = algo == BAGUA_BUCKET_QUANTIZED || algo == BAGUA_BUCKET_ONEBIT || algo == BAGUA_BUCKET_QADAM ||
                          algo == BAGUA_BUCKET_LOW_PRECISION_DECENTRALIZED;
  // What decides the sequence and sizes of the buckets' calls, for this algorithm (0 where it does not apply; the
  // seed and error feedback stay local).
  const std::vector<std::pair<const char*, uint64_t>> settings = {
      {"algorithm", static_cast<uint64_t>(algo)},
      {"op", static_cast<uint64_t>(config_.op)},
      {"bucket_bytes", config_.bucket_bytes},
      {"autotune", config_.autotune ? 1u : 0u},
      {"hierarchical", static_cast<uint64_t>(config_.hierarchical)},
      {"topology", algo == BAGUA_BUCKET_DECENTRALIZED ? static_cast<uint64_t>(config_.topology) : 0},
      {"warmup_steps", algo == BAGUA_BUCKET_QADAM ? static_cast<uint64_t>(config_.warmup_steps) : 0},
      {"beta1", algo == BAGUA_BUCKET_QADAM ? beta1_bits : 0},
      {"compression kind", compressed ? static_cast<uint64_t>(c.kind) : 0},
      {"compression bits", compressed ? static_cast<uint64_t>(c.bits) : 0},
      {"compression chunk", compressed ? c.chunk : 0},
      {"stochastic rounding", compressed && c.stochastic ? 1u : 0u}};
  const size_t n = settings.size();
  std::vector<uint64_t> both(2 * n);  // MAX of the values and of their complements (~max = min)
  for (size_t i = 0; i < n; ++i) both[i] = settings[i].second, both[n + i] = ~settings[i].second;
  allreduce_now(*comm_, both.data(), both.data(), both.size(), BAGUA_UINT64, BAGUA_MAX);
  for (size_t i = 0; i < n; ++i)
    if (both[i] != ~both[n + i])
      fail(BAGUA_ERR_INVALID_USAGE,
           "the scheduler's {} differs across ranks (from {} to {}; this rank {}); every rank must create its "
           "scheduler with the same settings",
           settings[i].first, ~both[n + i], both[i], settings[i].second);
}

void BucketScheduler::register_tensors(const std::vector<void*>& tensors, const std::vector<TensorSpec>& specs,
                                       int device) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (registered_) fail(BAGUA_ERR_INVALID_USAGE, "tensors are registered once per scheduler");
    if (failed_) throw_failure();
  }
  // Every rank the same layout: one MAX allreduce of (n, counts, dtypes) and of their complements (~max = min).
  const size_t n = specs.size();
  std::vector<uint64_t> mine(1 + 2 * n);
  mine[0] = n;
  for (size_t i = 0; i < n; ++i) mine[1 + 2 * i] = specs[i].count, mine[2 + 2 * i] = specs[i].dtype;
  {
    std::vector<uint64_t> head = {n, ~uint64_t{n}};
    allreduce_now(*comm_, head.data(), head.data(), 2, BAGUA_UINT64, BAGUA_MAX);
    if (head[0] != ~head[1])
      fail(BAGUA_ERR_INVALID_USAGE, "ranks registered different numbers of tensors ({} to {}; this rank {})", ~head[1],
           head[0], n);
  }
  std::vector<uint64_t> both(2 * mine.size());
  for (size_t i = 0; i < mine.size(); ++i) both[i] = mine[i], both[mine.size() + i] = ~mine[i];
  allreduce_now(*comm_, both.data(), both.data(), both.size(), BAGUA_UINT64, BAGUA_MAX);
  for (size_t i = 0; i < n; ++i) {
    uint64_t count_hi = both[1 + 2 * i], count_lo = ~both[mine.size() + 1 + 2 * i];
    uint64_t dtype_hi = both[2 + 2 * i], dtype_lo = ~both[mine.size() + 2 + 2 * i];
    if (count_hi != count_lo || dtype_hi != dtype_lo)
      fail(BAGUA_ERR_INVALID_USAGE,
           "tensor {} differs across ranks: counts {} to {}, dtypes {} to {} (this rank: {} x {}); every rank must "
           "register the same layout",
           i, count_lo, count_hi, datatype_name(static_cast<bagua_datatype_t>(dtype_lo)),
           datatype_name(static_cast<bagua_datatype_t>(dtype_hi)), specs[i].count, datatype_name(specs[i].dtype));
  }

  check_same_settings();

  std::vector<TensorSpec> laid = specs;
  assign_state_offsets(laid);
  std::vector<Tensor> made(n);
  std::map<bagua_datatype_t, size_t> elements;
  for (size_t i = 0; i < n; ++i) {
    made[i].data = tensors[i];
    made[i].spec = laid[i];
    made[i].bytes = laid[i].count * datatype_size(laid[i].dtype);
    elements[laid[i].dtype] += laid[i].count;
  }
  if (device >= 0) {
    // One staging for every bucket layout: a region per dtype, its tensors in state order (a bucket's tensors are
    // consecutive there), so that a mark can copy its tensor in before the step's buckets are known.
    std::map<bagua_datatype_t, size_t> region;
    size_t staging_bytes = 0;
    for (auto& [dtype, count] : elements) {
      region[dtype] = staging_bytes;
      staging_bytes += (count * datatype_size(dtype) + 255) & ~size_t{255};
    }
    DeviceRuntime& rt = device_runtime();
    device_ = device;
    stream_ = rt.create_stream(device);
    auto mapped = [&](size_t bytes) {
      auto buffer = std::make_unique<MappedBuffer>();
      buffer->data = rt.alloc_mapped(std::max<size_t>(bytes, 1));
      if (buffer->data == nullptr)
        fail(BAGUA_ERR_SYSTEM, "out of page-locked memory for the scheduler's staging ({} bytes)", bytes);
      return buffer;
    };
    staging_ = mapped(staging_bytes);
    staged_words_ = mapped(n * sizeof(uint32_t));
    std::memset(staged_words_->data, 0, n * sizeof(uint32_t));
    done_word_ = mapped(sizeof(uint32_t));
    publish_done(0);
    for (Tensor& t : made)
      t.staged = static_cast<uint8_t*>(staging_->data) + region[t.spec.dtype] +
                 t.spec.state_offset * datatype_size(t.spec.dtype);
  }
  const bool compressed = config_.algorithm == BAGUA_BUCKET_QUANTIZED || config_.algorithm == BAGUA_BUCKET_ONEBIT ||
                          config_.algorithm == BAGUA_BUCKET_QADAM;
  if (compressed && config_.compression.error_feedback)
    for (auto& [dtype, count] : elements) error_[dtype].assign(count, 0.0f);
  if (config_.algorithm == BAGUA_BUCKET_QADAM) momentum_.assign(elements[BAGUA_FLOAT32], 0.0f);
  if (config_.algorithm == BAGUA_BUCKET_DECENTRALIZED) {
    topology_ = Topology::builtin(comm_->size(), config_.topology);
  }
  if (config_.algorithm == BAGUA_BUCKET_LOW_PRECISION_DECENTRALIZED) {
    const size_t count = elements[BAGUA_FLOAT32];
    replica_self_.resize(count);
    auto copy_replicas = [&] {
      for (const Tensor& t : made) {
        float* replica = replica_self_.data() + t.spec.state_offset;
        if (stream_)
          device_runtime().copy_async(replica, t.data, t.bytes, nullptr);  // after the caller's initialisation
        else
          std::memcpy(replica, t.data, t.bytes);
      }
      if (stream_) device_runtime().synchronize(nullptr, comm_->config().timeout_ms);
    };
    if (stream_)
      device_runtime().on_device(device_, copy_replicas);  // the legacy default stream of the tensors' device
    else
      copy_replicas();
    if (config_.compression.error_feedback) replica_error_.assign(count, 0.0f);
    LpdecSlice all;
    all.count = count;
    all.self = replica_self_.data();
    for (int peer : lpdec_neighbours(*comm_)) {
      replica_neighbours_[peer].resize(count);
      all.neighbours[peer] = replica_neighbours_[peer].data();
    }
    lpdec_exchange_initial(*comm_, all);
  }

  {
    std::lock_guard<std::mutex> lock(mutex_);
    tensors_ = std::move(made);
  }
  const size_t largest = std::max<size_t>(total_bytes_of_largest_dtype(laid), 1);
  const bool try_hierarchy = config_.hierarchical == BAGUA_HIERARCHICAL_AUTO && hierarchy_applies();
  if (config_.autotune && (largest > kMinTunedBucket || try_hierarchy)) {
    size_t max_bytes = std::min(kMaxTunedBucket, std::max(kMinTunedBucket, largest));
    // Round the largest up: a bucket that holds everything is a candidate.
    size_t top = floor_power_of_two(max_bytes);
    if (top < max_bytes && top < kMaxTunedBucket) top *= 2;
    tuner_ = std::make_unique<BucketTuner>(bucket_bytes_, kMinTunedBucket, top, try_hierarchy, try_hierarchy);
    tuning_active_ = true;
    if (try_hierarchy) hierarchy_ = Hierarchy::kHierarchical;
  }
  if (hierarchy_ == Hierarchy::kHierarchical && !hierarchy_applies()) {  // HIERARCHICAL_ON where it cannot apply
    BAGUA_INFO("bucket scheduler: hierarchical communication does not apply to this layout; flat");
    hierarchy_ = Hierarchy::kFlat;
  }
  apply_layout(bucket_bytes_, hierarchy_);
  std::lock_guard<std::mutex> lock(mutex_);
  for (StepSlot& slot : slots_) slot.clear(tensors_.size());
  registered_ = true;
}

void BucketScheduler::apply_layout(size_t bucket_bytes, Hierarchy hierarchy) {
  bucket_bytes_ = bucket_bytes;
  hierarchy_ = hierarchy;
  std::vector<TensorSpec> specs;
  for (const Tensor& t : tensors_) specs.push_back(t.spec);
  std::vector<BucketSpec> plan = plan_buckets(specs, bucket_bytes_);
  std::vector<Bucket> buckets(plan.size());
  const Codec c = config_.weight_algorithm() || config_.algorithm == BAGUA_BUCKET_ALLREDUCE ? Codec() : codec();
  for (size_t k = 0; k < plan.size(); ++k) {
    Bucket& b = buckets[k];
    b.spec = std::move(plan[k]);
    uint8_t* expect = static_cast<uint8_t*>(tensors_[b.spec.tensors.front()].data);
    bool adjacent = true;
    for (int t : b.spec.tensors) {
      adjacent = adjacent && tensors_[t].data == expect;
      expect += tensors_[t].bytes;
    }
    const size_t bytes = b.spec.count * datatype_size(b.spec.dtype);
    if (device_ >= 0) {
      // staged: the tensors' staging
    } else if (adjacent) {
      b.in_place = static_cast<uint8_t*>(tensors_[b.spec.tensors.front()].data);
    } else {
      b.flat.resize(bytes);
    }
    auto err = error_.find(b.spec.dtype);
    if (err != error_.end())
      b.qstate = std::make_unique<QuantizedState>(*comm_, b.spec.count, b.spec.dtype, c,
                                                  err->second.data() + b.spec.state_offset, steps_);
  }
  buckets_ = std::move(buckets);
  if (config_.algorithm == BAGUA_BUCKET_DECENTRALIZED) {
    const bool hier = hierarchy_ == Hierarchy::kHierarchical;
    topology_ = Topology::builtin(hier ? comm_->nhosts() : comm_->size(), config_.topology);
    topology_.hierarchical = hier;
  }
  std::lock_guard<std::mutex> lock(mutex_);
  info_.bucket_bytes = bucket_bytes_;
  info_.buckets = static_cast<int>(buckets_.size());
  info_.hierarchical = hierarchy_ == Hierarchy::kHierarchical;
}

void BucketScheduler::check_tensor(int tensor, const char* what) const {
  if (!registered_) fail(BAGUA_ERR_INVALID_USAGE, "{} before bagua_scheduler_register", what);
  if (tensor < 0 || tensor >= static_cast<int>(tensors_.size()))
    fail(BAGUA_ERR_INVALID_USAGE, "{}: tensor {} is not registered (tensors 0 to {})", what, tensor,
         static_cast<int>(tensors_.size()) - 1);
}

void BucketScheduler::throw_failure() const {
  throw Error(failure_status_, fmt::format("the scheduler failed: {}", failure_message_));
}

template <typename Pred>
void BucketScheduler::wait_for_thread(std::unique_lock<std::mutex>& lock, Pred pred) {
  // Every operation of a step gives up after the timeout; past (buckets + 2) of them, abort the communicator.
  const auto limit = std::chrono::milliseconds(static_cast<int64_t>(comm_->config().timeout_ms) *
                                               static_cast<int64_t>(info_.buckets + 2));
  auto done = [&] { return failed_ || pred(); };
  if (done_.wait_for(lock, limit, done)) return;
  comm_->abort();
  if (done_.wait_for(lock, std::chrono::seconds(5), done)) return;
  record_failure(BAGUA_ERR_TIMEOUT, "a step did not finish within the timeout of each of its buckets");
  publish_done(static_cast<uint32_t>(generation_ + (1u << 30)));  // no stream stays parked on the stuck thread
}

// The first failure stays: every later call reports it.
void BucketScheduler::record_failure(bagua_status_t status, const std::string& message) {
  if (failed_) return;
  failed_ = true;
  failure_status_ = status;
  failure_message_ = message;
}

// The thread may finish a step before the caller's wait: until that wait, the step's calls are refused alike on
// every rank (they would land in the next step's slot on a fast rank only).
void BucketScheduler::check_step_not_finished(const char* what) const {
  if (done_generation_ > generation_)
    fail(BAGUA_ERR_INVALID_USAGE, "{}: this step is complete (every tensor was marked); call wait first", what);
}

void BucketScheduler::mark(int tensor, Mark kind, void* event) {
  const char* what = kind == Mark::kReady ? "mark_ready" : "mark_unused";
  std::lock_guard<std::mutex> enqueue(enqueue_mutex_);
  uint32_t step_word = 0;
  {
    std::unique_lock<std::mutex> lock(mutex_);
    if (failed_) throw_failure();
    check_tensor(tensor, what);
    if (event != nullptr && device_ < 0)
      fail(BAGUA_ERR_INVALID_ARGUMENT, "event is for device tensors; the registered tensors are host memory");
    if (kind == Mark::kUnused && config_.weight_algorithm())
      fail(BAGUA_ERR_INVALID_USAGE, "mark_unused: the decentralized algorithms average weights, which always exist");
    // This step's slot was step g - 2's: wait until the thread is done with that one (device tensors only).
    wait_for_thread(lock, [&] { return done_generation_ + 1 >= generation_; });
    if (failed_) throw_failure();
    check_step_not_finished(what);
    StepSlot& slot = slots_[generation_ % 2];
    if (slot.skipped) fail(BAGUA_ERR_INVALID_USAGE, "{}: this step was skipped; wait ends it", what);
    if (slot.marks[tensor] != Mark::kNone)
      fail(BAGUA_ERR_INVALID_USAGE, "tensor {} was already marked {} in this step", tensor,
           slot.marks[tensor] == Mark::kReady ? "ready" : "unused");
    // (A device tensor's bucket may start now: the scheduler's thread then waits for its staged word.)
    slot.marks[tensor] = kind;
    slot.open = true;
    step_word = static_cast<uint32_t>(generation_ + 1);
  }
  if (device_ >= 0) {
    try {
      stage_at_mark(tensor, kind, event, step_word);
    } catch (const Error& e) {
      enqueue_failed_ = true;
      fail_and_release(e);
      throw;
    }
  }
  wake_.notify_all();
}

void BucketScheduler::skip_step() {
  {
    std::unique_lock<std::mutex> lock(mutex_);
    if (failed_) throw_failure();
    if (!registered_) fail(BAGUA_ERR_INVALID_USAGE, "skip_step before bagua_scheduler_register");
    wait_for_thread(lock, [&] { return done_generation_ + 1 >= generation_; });
    if (failed_) throw_failure();
    check_step_not_finished("skip_step");
    StepSlot& slot = slots_[generation_ % 2];
    if (slot.open) fail(BAGUA_ERR_INVALID_USAGE, "skip_step after tensors of this step were marked");
    slot.skipped = slot.open = true;
  }
  wake_.notify_all();
}

bool BucketScheduler::step_in_flight() {
  std::lock_guard<std::mutex> lock(mutex_);
  // After a device wait the current slot may still be step g - 2's, open until the thread finishes it.
  return registered_ && !failed_ && done_generation_ + 1 >= generation_ && slots_[generation_ % 2].open;
}

bool BucketScheduler::failed() {
  std::lock_guard<std::mutex> lock(mutex_);
  return failed_;
}

void BucketScheduler::drain() {
  std::unique_lock<std::mutex> lock(mutex_);
  wait_for_thread(lock, [&] { return done_generation_ >= generation_; });
  if (failed_) throw_failure();
}

void BucketScheduler::wait(DeviceStream stream) {
  std::lock_guard<std::mutex> enqueue(enqueue_mutex_);
  std::unique_lock<std::mutex> lock(mutex_);
  if (failed_) throw_failure();
  if (!registered_) fail(BAGUA_ERR_INVALID_USAGE, "wait before bagua_scheduler_register");
  // This step's slot was step g - 2's: wait until the thread is done with that one (device tensors only).
  wait_for_thread(lock, [&] { return done_generation_ + 1 >= generation_; });
  if (failed_) throw_failure();
  StepSlot& slot = slots_[generation_ % 2];
  const bool finished = done_generation_ > generation_;  // (then the thread has cleared the slot already)
  if (!finished && !slot.skipped)
    for (size_t i = 0; i < tensors_.size(); ++i)
      if (slot.marks[i] == Mark::kNone)
        fail(BAGUA_ERR_INVALID_USAGE,
             "wait: tensor {} was neither marked ready nor unused in this step (mark every tensor, or skip the step)",
             i);
  const uint64_t step = generation_;
  if (device_ >= 0) {
    // Stream-ordered: the caller's stream waits for the step, then copies the results back. The thread may run
    // meanwhile; the CUDA calls are made without mutex_.
    const bool skipped = !finished && slot.skipped;
    lock.unlock();
    try {
      copy_back_at_wait(stream, step, skipped);
    } catch (const Error& e) {
      enqueue_failed_ = true;
      fail_and_release(e);
      throw;
    }
    lock.lock();
    ++generation_;
    wake_.notify_all();
    return;
  }
  ++generation_;
  wake_.notify_all();
  wait_for_thread(lock, [&] { return done_generation_ > step; });
  if (failed_) throw_failure();
}

void BucketScheduler::set_bucket_bytes(size_t bytes) {
  if (bytes == 0) fail(BAGUA_ERR_INVALID_ARGUMENT, "bucket_bytes must be positive");
  std::unique_lock<std::mutex> lock(mutex_);
  if (failed_) throw_failure();
  // The current slot was step g - 2's (device steps): wait until the thread is done with it, as mark does.
  wait_for_thread(lock, [&] { return done_generation_ + 1 >= generation_; });
  if (failed_) throw_failure();
  if (registered_ && slots_[generation_ % 2].open)
    fail(BAGUA_ERR_INVALID_USAGE, "set_bucket_bytes during a step: call it between wait and the next mark");
  check_step_not_finished("set_bucket_bytes");
  pending_bucket_bytes_ = bytes;
  pending_generation_ = generation_;
}

SchedulerInfo BucketScheduler::info() {
  std::lock_guard<std::mutex> lock(mutex_);
  return info_;
}

void BucketScheduler::residual(int tensor, float* out, size_t count) {
  std::unique_lock<std::mutex> lock(mutex_);
  check_tensor(tensor, "residual");
  const Tensor& t = tensors_[tensor];
  if (count != t.spec.count)
    fail(BAGUA_ERR_INVALID_ARGUMENT, "count {} differs from tensor {}'s {}", count, tensor, t.spec.count);
  wait_for_thread(lock, [&] { return done_generation_ + 1 >= generation_; });  // the slot is this step's
  if (slots_[generation_ % 2].open && !failed_)
    fail(BAGUA_ERR_INVALID_USAGE, "residual during a step: call it after wait");
  wait_for_thread(lock, [&] { return done_generation_ >= generation_; });  // device steps still running
  auto err = error_.find(t.spec.dtype);
  std::vector<float> zeros(err == error_.end() ? count : 0, 0.0f);
  const float* residual = err == error_.end() ? zeros.data() : err->second.data() + t.spec.state_offset;
  device_runtime().copy_from_host_to_any(out, residual, count * sizeof(float), comm_->config().timeout_ms);
}

// ---- the scheduler's thread ----

void BucketScheduler::publish_done(uint32_t value) {
  if (!done_word_) return;
  // Never lower it: after the monitor released the streams, a step the thread then finishes must not park them.
  std::lock_guard<std::mutex> lock(publish_mutex_);
  auto* word = static_cast<uint32_t*>(done_word_->data);
  if (static_cast<int32_t>(value - __atomic_load_n(word, __ATOMIC_ACQUIRE)) > 0 || value == 0)
    __atomic_store_n(word, value, __ATOMIC_RELEASE);
}

void BucketScheduler::fail_and_release(const Error& error) {
  uint32_t released;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    record_failure(error.status(), error.what());
    released = static_cast<uint32_t>(generation_ + (1u << 30));
  }
  publish_done(released);
  wake_.notify_all();
  done_.notify_all();
}

void BucketScheduler::run() {
  set_log_rank(comm_->rank());
  HostMemoryOnlyThread host_only;  // this thread's calls name the staging or host tensors: no driver call to detect it
  for (;;) {
    StepSlot* slot;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      // A skipped step ends at its wait (until then marks must still be refused).
      wake_.wait(lock, [&] {
        const StepSlot& next = slots_[done_generation_ % 2];
        return quit_ || (next.open && (!next.skipped || generation_ > done_generation_));
      });
      if (quit_) {
        // Never leave a stream parked on this scheduler (destroy drained the steps waited for).
        publish_done(static_cast<uint32_t>(generation_ + (1u << 30)));
        return;
      }
      slot = &slots_[done_generation_ % 2];
    }
    try {
      if (slot->skipped) {
        finish_step(true);
        continue;
      }
      run_step(*slot);
      finish_step(false);
    } catch (const Error& e) {
      std::lock_guard<std::mutex> lock(mutex_);
      record_failure(e.status(), e.what());
    } catch (const std::exception& e) {
      std::lock_guard<std::mutex> lock(mutex_);
      record_failure(BAGUA_ERR_INTERNAL, fmt::format("internal error: {}", e.what()));
    }
    bool stop;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop = failed_;
    }
    if (stop) {
      // Release every stream that waits or will wait on this scheduler: later calls report the failure.
      publish_done(static_cast<uint32_t>(done_generation_ + (1u << 30)));
      done_.notify_all();
      return;
    }
  }
}

// The step is over: its slot is free for step g + 2, streams waiting on it go on, and (on rank 0) its time
// counts for the tuner: from the previous step's end, so compute and overlap count.
void BucketScheduler::finish_step(bool skipped) {
  const auto now = std::chrono::steady_clock::now();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!skipped && last_done_valid_) {
      info_.step_ms = std::chrono::duration<double, std::milli>(now - last_done_).count();
      if (tuner_ && comm_->rank() == 0) tuner_->record(info_.step_ms / 1e3);
    }
    last_done_ = now;
    last_done_valid_ = !skipped;  // the next step's time would include the skipped one's compute
    slots_[done_generation_ % 2].clear(tensors_.size());
    ++done_generation_;
    publish_done(static_cast<uint32_t>(done_generation_));
  }
  done_.notify_all();
}

bool BucketScheduler::bucket_ready(const Bucket& b, const StepSlot& slot) const {
  for (int t : b.spec.tensors)
    if (slot.marks[t] == Mark::kNone) return false;
  return true;
}

void BucketScheduler::decide_if_due() {
  size_t forced = 0;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (pending_bucket_bytes_ != 0 && done_generation_ >= pending_generation_) {
      forced = pending_bucket_bytes_;
      pending_bucket_bytes_ = 0;
    }
  }
  if (forced != 0) {  // every rank calls it between the same steps
    tuning_active_ = false;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      info_.tuning = false;
    }
    if (forced != bucket_bytes_) apply_layout(forced, hierarchy_);
    return;
  }
  if (!tuning_active_ || steps_ != next_decision_step_) return;
  // Rank 0's decision, broadcast: bytes, hierarchical, window, tuning, settled, step time (ns).
  uint64_t message[6] = {};
  if (comm_->rank() == 0) {
    TuneDecision d;
    double step_ms;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      d = tuner_->decide();
      step_ms = info_.step_ms;
    }
    message[0] = d.choice.bucket_bytes;
    message[1] = d.choice.hierarchical;
    message[2] = static_cast<uint64_t>(d.window_steps);
    message[3] = d.tuning;
    message[4] = d.settled;
    message[5] = static_cast<uint64_t>(step_ms * 1e6);
  }
  CollectiveArgs args = args_of(Collective::kBroadcast, message, message, 6, BAGUA_UINT64, BAGUA_SUM, 0);
  auto op = make_collective(*comm_, args, ", scheduler decision");
  run_to_completion(*comm_, *op);
  const Hierarchy h = hierarchy_applies() && config_.hierarchical == BAGUA_HIERARCHICAL_AUTO
                          ? (message[1] ? Hierarchy::kHierarchical : Hierarchy::kFlat)
                          : hierarchy_;
  const bool changed = message[0] != bucket_bytes_ || h != hierarchy_;
  if (changed) apply_layout(message[0], h);
  next_decision_step_ = steps_ + std::max<uint64_t>(1, message[2]);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    info_.decisions++;
    info_.tuning = message[3] != 0;
    info_.settled = message[4] != 0;
    if (comm_->rank() != 0) info_.step_ms = message[5] / 1e6;
  }
  if (message[4]) {
    tuning_active_ = false;
    BAGUA_INFO("bucket scheduler settled at step {}: {} buckets of at most {} bytes, {} (last step {:.3f} ms)", steps_,
               buckets_.size(), bucket_bytes_, hierarchy_ == Hierarchy::kHierarchical ? "hierarchical" : "flat",
               message[5] / 1e6);
  } else if (changed) {
    BAGUA_INFO("bucket scheduler step {}: trying buckets of {} bytes, {}", steps_, bucket_bytes_,
               hierarchy_ == Hierarchy::kHierarchical ? "hierarchical" : "flat");
  }
}

void BucketScheduler::run_step(StepSlot& slot) {
  decide_if_due();
  for (Bucket& b : buckets_) {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return quit_ || bucket_ready(b, slot); });
      if (quit_) fail(BAGUA_ERR_ABORTED, "the scheduler was destroyed during a step");
    }
    run_bucket(b, slot);
  }
  ++steps_;
  const uint64_t sent = comm_->stats().bytes_sent;  // (the engine's counters belong to this thread)
  std::lock_guard<std::mutex> lock(mutex_);
  info_.steps = steps_;
  info_.bytes_sent = sent;
}

void BucketScheduler::allreduce_bucket(void* data, size_t count, bagua_datatype_t dtype, bagua_redop_t op) {
  CollectiveArgs args = args_of(Collective::kAllreduce, data, data, count, dtype, op);
  args.algorithm = allreduce_algorithm();
  auto operation = make_collective(*comm_, args, ", bucket");
  run_to_completion(*comm_, *operation);
}

void BucketScheduler::quantized_bucket(Bucket& b, void* data, bagua_redop_t op) {
  auto operation = build_quantized_allreduce(*comm_, QuantizedArgs{data, data, b.spec.count, b.spec.dtype, op}, codec(),
                                             b.qstate.get());
  run_to_completion(*comm_, *operation);
}

void BucketScheduler::run_bucket(Bucket& b, StepSlot& slot) {
  if (b.spec.count == 0) return;  // zero-size tensors only: nothing to send, on every rank alike
  uint8_t* data = device_ >= 0 ? staged_data(b) : b.in_place ? b.in_place : b.flat.data();
  // Gather (unused tensors count as zeros).
  if (device_ >= 0) {
    await_staged(b);
    size_t offset = 0;
    for (int i : b.spec.tensors) {
      if (slot.marks[i] == Mark::kUnused) std::memset(data + offset, 0, tensors_[i].bytes);
      offset += tensors_[i].bytes;
    }
  } else {
    size_t offset = 0;
    for (int i : b.spec.tensors) {
      const Tensor& t = tensors_[i];
      if (slot.marks[i] == Mark::kUnused)
        std::memset(data + offset, 0, t.bytes);
      else if (!b.in_place && t.bytes)
        std::memcpy(data + offset, t.data, t.bytes);
      offset += t.bytes;
    }
  }
  switch (config_.algorithm) {
    case BAGUA_BUCKET_ALLREDUCE: allreduce_bucket(data, b.spec.count, b.spec.dtype, config_.op); break;
    case BAGUA_BUCKET_QUANTIZED:
    case BAGUA_BUCKET_ONEBIT: quantized_bucket(b, data, config_.op); break;
    case BAGUA_BUCKET_QADAM: {
      float* g = reinterpret_cast<float*>(data);
      float* m = momentum_.data() + b.spec.state_offset;
      const float beta = config_.beta1, rest = 1 - config_.beta1;
      if (steps_ < static_cast<uint64_t>(config_.warmup_steps)) {
        // Warm-up: exact gradient averages; the momentum follows them so that the switch is seamless.
        allreduce_bucket(g, b.spec.count, BAGUA_FLOAT32, BAGUA_AVG);
        for (size_t i = 0; i < b.spec.count; ++i) m[i] = beta * m[i] + rest * g[i];
      } else {
        for (size_t i = 0; i < b.spec.count; ++i) m[i] = beta * m[i] + rest * g[i];
        auto operation = build_quantized_allreduce(*comm_, QuantizedArgs{m, m, b.spec.count, BAGUA_FLOAT32, BAGUA_AVG},
                                                   codec(), b.qstate.get());
        run_to_completion(*comm_, *operation);
        std::memcpy(g, m, b.spec.count * sizeof(float));
      }
      break;
    }
    case BAGUA_BUCKET_DECENTRALIZED: {
      auto operation =
          build_neighbor_allreduce(*comm_, topology_, NeighborArgs{data, data, b.spec.count, b.spec.dtype, steps_});
      run_to_completion(*comm_, *operation);
      break;
    }
    case BAGUA_BUCKET_LOW_PRECISION_DECENTRALIZED: {
      LpdecSlice slice;
      slice.count = b.spec.count;
      slice.self = replica_self_.data() + b.spec.state_offset;
      for (auto& [peer, replica] : replica_neighbours_) slice.neighbours[peer] = replica.data() + b.spec.state_offset;
      slice.error = replica_error_.empty() ? nullptr : replica_error_.data() + b.spec.state_offset;
      slice.index_base = b.spec.state_offset;
      lpdec_step(*comm_, codec(), slice, steps_, reinterpret_cast<float*>(data));
      break;
    }
  }
  if (device_ >= 0 || b.in_place) return;  // (device tensors: copied back at wait)
  size_t offset = 0;
  for (int i : b.spec.tensors) {
    const Tensor& t = tensors_[i];
    if (t.bytes) std::memcpy(t.data, data + offset, t.bytes);
    offset += t.bytes;
  }
}

}  // namespace bagua

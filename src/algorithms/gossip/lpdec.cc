#include "algorithms/gossip/lpdec.h"

#include <cstring>

#include "algorithms/dispatch.h"
#include "algorithms/schedule.h"
#include "core/tags.h"
#include "kernels/device_runtime.h"
#include "kernels/quantize.h"

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

namespace {

// The replicas' weights in the ring plan's receive order, and the pointers to them.
struct Weights {
  float self;
  std::vector<float> replica;
};
Weights weights_of(const NeighborPlan& plan) {
  Weights w{static_cast<float>(plan.self_weight), {}};
  for (auto& [peer, weight] : plan.receives) w.replica.push_back(static_cast<float>(weight));
  return w;
}

// The step's exchange: mine (bytes) to the ring's out-neighbours, theirs[k] from plan.receives[k].
void exchange_compressed(Comm& comm, const Codec& codec, size_t count, uint64_t step, const uint8_t* mine,
                         const std::vector<uint8_t*>& theirs) {
  NeighborPlan plan = ring_plan(comm);
  const size_t bytes = codec.compressed_bytes(count);
  auto s = new_schedule(comm, {count, mix_details(step, hash_name(codec.describe().c_str()))});
  Round& round = s->round();
  for (size_t k = 0; k < plan.receives.size(); ++k) round.recvs.push_back({plan.receives[k].first, theirs[k], bytes});
  for (int peer : plan.sends) round.sends.push_back({peer, mine, bytes});
  ScheduleOp op(BAGUA_OPKIND_NEIGHBOR_ALLREDUCE, fmt::format("lpdec step {} ({} floats)", step, count), std::move(s));
  run_to_completion(comm, op);
}

}  // namespace

void lpdec_step(Comm& comm, const Codec& codec, const LpdecSlice& slice, uint64_t step, float* x) {
  NeighborPlan plan = ring_plan(comm);
  const size_t count = slice.count;
  float* self = slice.self;
  // t = x + (weighted replica average - own replica); then the difference to send.
  std::vector<float> diff(count);
  const Weights w = weights_of(plan);
  std::vector<const float*> replicas;
  for (auto& [peer, weight] : plan.receives) replicas.push_back(slice.neighbours.at(peer));
  gossip_difference(diff.data(), x, self, replicas.data(), w.replica.data(), static_cast<int>(replicas.size()), w.self,
                    count);

  const size_t bytes = codec.compressed_bytes(count);
  std::vector<uint8_t> mine(bytes), theirs_bytes(bytes * plan.receives.size());
  std::vector<uint8_t*> theirs;
  for (size_t k = 0; k < plan.receives.size(); ++k) theirs.push_back(theirs_bytes.data() + k * bytes);
  RoundingKey key{codec.stochastic(), codec.seed(), step, static_cast<uint32_t>(comm.rank()), slice.index_base};
  codec.compress(diff.data(), count, slice.error, key, mine.data());
  exchange_compressed(comm, codec, count, step, mine.data(), theirs);
  codec.decompress_accumulate(mine.data(), count, self);
  for (size_t k = 0; k < plan.receives.size(); ++k)
    codec.decompress_accumulate(theirs[k], count, slice.neighbours.at(plan.receives[k].first));
  std::memcpy(x, self, count * sizeof(float));
}

LowPrecisionDecentralized::LowPrecisionDecentralized(Comm& comm, size_t count, const Codec& codec, const float* initial,
                                                     int device)
    : comm_(comm), count_(count), codec_(codec), timeout_ms_(comm.config().timeout_ms), device_(device) {
  if (device_ < 0) {
    self_.assign(initial, initial + count);
    if (codec.error_feedback()) error_.assign(count, 0.0f);
    for (int peer : lpdec_neighbours(comm)) neighbours_[peer].resize(count);
    lpdec_exchange_initial(comm, slice());
    return;
  }
  // Device replicas: the initial exchange goes through host copies, then everything stays on the device.
  DeviceRuntime& runtime = device_runtime();
  const std::vector<int> peers = lpdec_neighbours(comm);
  const size_t floats = count * sizeof(float), bytes = (codec.compressed_bytes(count) + 15) / 16 * 16;
  const size_t arrays = 3 + peers.size() + (codec.error_feedback() ? 1 : 0);  // self, diff, x, neighbours, error
  stream_ = runtime.create_stream(device_);
  try {
    device_block_ = runtime.alloc_device_async(arrays * floats + (1 + peers.size()) * bytes, stream_);
  } catch (...) {
  }
  if (device_block_ == nullptr) {
    runtime.destroy_stream(stream_);
    fail(BAGUA_ERR_SYSTEM, "out of memory: could not allocate the low-precision decentralized replicas on device {}",
         device_);
  }
  auto* at = static_cast<uint8_t*>(device_block_);
  auto take = [&](size_t n) {
    uint8_t* p = at;
    at += n;
    return p;
  };
  device_self_ = reinterpret_cast<float*>(take(floats));
  device_diff_ = reinterpret_cast<float*>(take(floats));
  device_x_ = reinterpret_cast<float*>(take(floats));
  for (int peer : peers) device_neighbours_[peer] = reinterpret_cast<float*>(take(floats));
  if (codec.error_feedback()) device_error_ = reinterpret_cast<float*>(take(floats));
  device_mine_ = take(bytes);
  for (size_t k = 0; k < peers.size(); ++k) device_theirs_.push_back(take(bytes));
  std::vector<float> self(count), zeros(device_error_ ? count : 0, 0.0f);
  std::map<int, std::vector<float>> neighbours;
  LpdecSlice host;
  host.count = count;
  host.self = self.data();
  for (int peer : peers) {
    neighbours[peer].resize(count);
    host.neighbours[peer] = neighbours[peer].data();
  }
  try {
    runtime.copy_async(device_self_, initial, floats, stream_);
    runtime.copy_async(self.data(), initial, floats, stream_);
    runtime.synchronize(stream_, timeout_ms_);
    lpdec_exchange_initial(comm, host);
    for (int peer : peers) runtime.copy_async(device_neighbours_[peer], neighbours[peer].data(), floats, stream_);
    if (device_error_) runtime.copy_async(device_error_, zeros.data(), floats, stream_);
    runtime.synchronize(stream_, timeout_ms_);
  } catch (...) {  // (no destructor runs for a constructor that throws)
    try {
      runtime.synchronize(stream_, timeout_ms_);  // its copies from the host vectors above
    } catch (...) {
    }
    runtime.free_device_async(device_block_, stream_);
    runtime.destroy_stream(stream_);
    throw;
  }
}

LowPrecisionDecentralized::~LowPrecisionDecentralized() {
  if (device_block_ == nullptr) return;
  device_runtime().free_device_async(device_block_, stream_);  // after its work; no wait for the device
  device_runtime().destroy_stream(stream_);
}

// The same step as lpdec_step, with kernels on the object's stream; only compressed bytes leave the device.
void LowPrecisionDecentralized::step_on_device(float* x) {
  DeviceRuntime& runtime = device_runtime();
  const int timeout = timeout_ms_;
  const uint64_t step = steps_++;
  NeighborPlan plan = ring_plan(comm_);
  const Weights w = weights_of(plan);
  std::vector<const float*> replicas;
  for (auto& [peer, weight] : plan.receives) replicas.push_back(device_neighbours_.at(peer));
  const size_t bytes = codec_.compressed_bytes(count_);
  std::vector<uint8_t> mine(bytes), theirs_bytes(bytes * plan.receives.size());
  std::vector<uint8_t*> theirs;
  for (size_t k = 0; k < plan.receives.size(); ++k) theirs.push_back(theirs_bytes.data() + k * bytes);
  RoundingKey key{codec_.stochastic(), codec_.seed(), step, static_cast<uint32_t>(comm_.rank()), 0};
  runtime.gossip_difference_async(device_diff_, x, device_self_, replicas.data(), w.replica.data(),
                                  static_cast<int>(replicas.size()), w.self, count_, stream_);
  runtime.compress_async(codec_.spec(), device_diff_, count_, device_error_, key, device_mine_, stream_);
  runtime.copy_async(mine.data(), device_mine_, bytes, stream_);
  runtime.synchronize(stream_, timeout);
  exchange_compressed(comm_, codec_, count_, step, mine.data(), theirs);
  for (size_t k = 0; k < theirs.size(); ++k) runtime.copy_async(device_theirs_[k], theirs[k], bytes, stream_);
  runtime.decompress_async(codec_.spec(), device_mine_, count_, device_self_, true, stream_);
  for (size_t k = 0; k < theirs.size(); ++k)
    runtime.decompress_async(codec_.spec(), device_theirs_[k], count_, device_neighbours_.at(plan.receives[k].first),
                             true, stream_);
  runtime.copy_async(x, device_self_, count_ * sizeof(float), stream_);
  runtime.synchronize(stream_, timeout);
}

LpdecSlice LowPrecisionDecentralized::slice() {
  LpdecSlice s;
  s.count = count_;
  s.self = self_.data();
  for (auto& [peer, replica] : neighbours_) s.neighbours[peer] = replica.data();
  s.error = error_.empty() ? nullptr : error_.data();
  return s;
}

void LowPrecisionDecentralized::step(float* x) {
  int x_device = -1;
  const bool x_on_host = device_runtime().memory_type(x, &x_device) == MemoryType::kHost;
  if (device_ >= 0 && !x_on_host && x_device != device_)
    fail(BAGUA_ERR_INVALID_ARGUMENT, "x is on device {}, the replicas on device {}", x_device, device_);
  // A step that fails midway has changed replicas or error feedback on this rank and not on its peers.
  after_sequence_taken(comm_, "an lpdec step", [&] { step_checked(x, x_on_host, x_device); });
}

void LowPrecisionDecentralized::step_checked(float* x, bool x_on_host, int x_device) {
  DeviceRuntime& runtime = device_runtime();
  const size_t bytes = count_ * sizeof(float);
  if (device_ < 0 && x_on_host) return lpdec_step(comm_, codec_, slice(), steps_++, x);
  if (device_ < 0) {  // host replicas, x on a device: a host image of x, stepped and copied back
    std::vector<float> staged(count_);
    runtime.on_device(x_device, [&] {  // on the legacy default stream of x's device
      runtime.copy_async(staged.data(), x, bytes, nullptr);
      runtime.synchronize(nullptr, timeout_ms_);
    });
    lpdec_step(comm_, codec_, slice(), steps_++, staged.data());
    runtime.on_device(x_device, [&] {
      runtime.copy_async(x, staged.data(), bytes, nullptr);
      runtime.synchronize(nullptr, timeout_ms_);
    });
    return;
  }
  // The caller's earlier work: the legacy default stream of the replicas' device (x's), whichever is current.
  runtime.on_device(device_, [&] { runtime.synchronize(nullptr, timeout_ms_); });
  if (!x_on_host) return step_on_device(x);
  runtime.copy_async(device_x_, x, bytes, stream_);  // device replicas, x on the host: through a device copy
  step_on_device(device_x_);
  runtime.copy_async(x, device_x_, bytes, stream_);
  runtime.synchronize(stream_, timeout_ms_);
}

int LowPrecisionDecentralized::peer_of(int which) const {
  if (which == 0 || comm_.size() == 1) return -1;
  int n = comm_.size();
  return which < 0 ? (comm_.rank() + n - 1) % n : (comm_.rank() + 1) % n;
}

void LowPrecisionDecentralized::copy_replica(int which, float* out) const {
  const int peer = peer_of(which);
  const size_t bytes = count_ * sizeof(float);
  DeviceRuntime& runtime = device_runtime();
  int out_device = -1;
  const bool out_on_host = runtime.memory_type(out, &out_device) == MemoryType::kHost;
  if (device_ >= 0) {
    // The caller's earlier work: the legacy default stream of out's device, or of the replicas' for host memory.
    runtime.on_device(out_on_host ? device_ : out_device, [&] { runtime.synchronize(nullptr, timeout_ms_); });
    runtime.copy_async(out, peer < 0 ? device_self_ : device_neighbours_.at(peer), bytes, stream_);
    runtime.synchronize(stream_, timeout_ms_);
    return;
  }
  // (Into device memory on the legacy default stream of out's device, as a step's copies.)
  runtime.copy_from_host_to_any(out, peer < 0 ? self_.data() : neighbours_.at(peer).data(), bytes, timeout_ms_);
}

}  // namespace bagua

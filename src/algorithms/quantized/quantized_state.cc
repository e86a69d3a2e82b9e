// The quantized allreduce's exchange group (who owns which block) and its per-tensor state: error feedback, on the
// host or in device memory, scratch and step counter (quantized_allreduce.h).
#include <algorithm>
#include <cstring>

#include "algorithms/cost_model.h"
#include "algorithms/patterns/ring.h"
#include "algorithms/quantized/quantized_allreduce.h"
#include "base/error.h"
#include "kernels/device_runtime.h"
#include "kernels/dtype.h"

namespace bagua {

QuantizedGroup QuantizedGroup::of(const Comm& comm, const Codec& codec) {
  QuantizedGroup g;
  bool shared_host = false;
  for (const auto& host : comm.hosts()) shared_host = shared_host || host.size() > 1;
  const bagua_hierarchical_t mode = codec.hierarchical();
  const double wire_bits = 8.0 * static_cast<double>(codec.compressed_bytes(codec.chunk())) / codec.chunk();
  g.hierarchical =
      mode == BAGUA_HIERARCHICAL_ON || (mode == BAGUA_HIERARCHICAL_AUTO && comm.nhosts() > 1 && shared_host &&
                                        wire_bits >= CostModel{}.quantized_hierarchical_min_bits);
  if (!g.hierarchical) {
    for (int r = 0; r < comm.size(); ++r) g.members.push_back(r);
    g.index = g.leader = comm.rank();
    return g;
  }
  const auto& mine = comm.hosts()[comm.host_of(comm.rank())];
  bool equal_hosts = true;
  for (const auto& host : comm.hosts()) equal_hosts = equal_hosts && host.size() == mine.size();
  if (equal_hosts) {
    g.rail = true;
    g.local_size = static_cast<int>(mine.size());
    g.local_index = static_cast<int>(std::find(mine.begin(), mine.end(), comm.rank()) - mine.begin());
    for (const auto& host : comm.hosts()) g.members.push_back(host[g.local_index]);
    std::sort(g.members.begin(), g.members.end());
    g.index = static_cast<int>(std::find(g.members.begin(), g.members.end(), comm.rank()) - g.members.begin());
    g.leader = comm.rank();
    for (int r : mine)
      if (r != comm.rank()) g.local_peers.push_back(r);
    return g;
  }
  for (const auto& host : comm.hosts()) g.members.push_back(host.front());
  std::sort(g.members.begin(), g.members.end());
  g.leader = mine.front();
  if (g.leader == comm.rank()) {
    g.index = static_cast<int>(std::find(g.members.begin(), g.members.end(), g.leader) - g.members.begin());
    g.local_peers.assign(mine.begin() + 1, mine.end());
  }
  return g;
}

size_t QuantizedGroup::slice_begin_of(size_t count, int local) const {
  return ring::chunk_begin(count, local_size, local);
}
size_t QuantizedGroup::slice_count_of(size_t count, int local) const {
  return ring::chunk_size(count, local_size, local);
}
size_t QuantizedGroup::slice_begin(size_t count) const { return slice_begin_of(count, local_index); }
size_t QuantizedGroup::slice_count(size_t count) const { return slice_count_of(count, local_index); }
size_t QuantizedGroup::block_offset_in(size_t count, int local, int b) const {
  return slice_begin_of(count, local) +
         ring::chunk_begin(slice_count_of(count, local), static_cast<int>(members.size()), b);
}
size_t QuantizedGroup::block_count_in(size_t count, int local, int b) const {
  return ring::chunk_size(slice_count_of(count, local), static_cast<int>(members.size()), b);
}
size_t QuantizedGroup::block_offset(size_t count, int b) const { return block_offset_in(count, local_index, b); }
size_t QuantizedGroup::block_count(size_t count, int b) const { return block_count_in(count, local_index, b); }

QuantizedState::QuantizedState(const Comm& comm, size_t count, bagua_datatype_t dtype, const Codec& codec)
    : comm_(&comm), count_(count), dtype_(dtype), codec_(codec), group_(QuantizedGroup::of(comm, codec)) {
  timeout_ms_ = comm.config().timeout_ms;
  if (codec.error_feedback() && group_.index >= 0 && group_.members.size() > 1) {
    worker_error_.assign(count, 0.0f);
    owner_error_.assign(group_.block_count(count, group_.index), 0.0f);
    worker_error_ptr_ = worker_error_.data();
    owner_error_ptr_ = owner_error_.data();
  }
}

QuantizedState::QuantizedState(const Comm& comm, size_t count, bagua_datatype_t dtype, const Codec& codec,
                               float* shared_error, uint64_t first_step)
    : comm_(&comm),
      count_(count),
      dtype_(dtype),
      codec_(codec),
      group_(QuantizedGroup::of(comm, codec)),
      step_(first_step),
      shares_error_(true) {
  timeout_ms_ = comm.config().timeout_ms;
  if (codec.error_feedback() && group_.index >= 0 && group_.members.size() > 1 && shared_error != nullptr) {
    worker_error_ptr_ = shared_error;
    owner_error_ptr_ = shared_error + group_.block_offset(count, group_.index);
  }
}

QuantizedState::~QuantizedState() {
  if (device_error_ == nullptr) return;
  device_runtime().free_device_async(device_error_, copy_stream_);  // after its copies; no wait for the device
  device_runtime().destroy_stream(copy_stream_);
}

void QuantizedState::reserve_device(int device) {
  if (worker_error_ptr_ == nullptr || shares_error_ || (device_error_ != nullptr && device == device_)) return;
  residual_to_host();  // (another device's copy is the live one: bring it back before its block goes)
  DeviceRuntime& runtime = device_runtime();
  const size_t bytes = (count_ + owner_error_.size()) * sizeof(float);
  DeviceStream stream = runtime.create_stream(device);
  void* block = nullptr;
  try {
    block = runtime.alloc_device_async(bytes, stream);
    if (block == nullptr)
      fail(BAGUA_ERR_SYSTEM, "out of memory: could not allocate {} bytes of device memory for the error feedback",
           bytes);
  } catch (...) {
    runtime.destroy_stream(stream);
    throw;
  }
  if (device_error_ != nullptr) {  // another device's, its contents now on the host
    runtime.free_device_async(device_error_, copy_stream_);
    runtime.destroy_stream(copy_stream_);
  }
  device_error_ = static_cast<float*>(block);
  copy_stream_ = stream;
  device_ = device;
}

void QuantizedState::residual_to_device(int device) {
  if (worker_error_ptr_ == nullptr || shares_error_) return;
  if (on_device_ && device == device_) return;
  residual_to_host();
  reserve_device(device);
  DeviceRuntime& runtime = device_runtime();
  runtime.copy_async(device_error_, worker_error_ptr_, count_ * sizeof(float), copy_stream_);
  runtime.copy_async(device_error_ + count_, owner_error_.data(), owner_error_.size() * sizeof(float), copy_stream_);
  runtime.synchronize(copy_stream_, timeout_ms_);
  on_device_ = true;
}

void QuantizedState::residual_to_host() {
  if (!on_device_) return;
  DeviceRuntime& runtime = device_runtime();
  runtime.copy_async(worker_error_ptr_, device_error_, count_ * sizeof(float), copy_stream_);
  runtime.copy_async(owner_error_.data(), device_error_ + count_, owner_error_.size() * sizeof(float), copy_stream_);
  runtime.synchronize(copy_stream_, timeout_ms_);
  on_device_ = false;
}

void QuantizedState::check_matches(const Comm& comm, size_t count, bagua_datatype_t dtype, const Codec& codec,
                                   bool check_busy) const {
  if (&comm != comm_) fail(BAGUA_ERR_INVALID_ARGUMENT, "state was created for another communicator");
  if (count != count_ || dtype != dtype_)
    fail(BAGUA_ERR_INVALID_ARGUMENT, "state was created for {} x {}, not {} x {}", count_, datatype_name(dtype_), count,
         datatype_name(dtype));
  if (codec.kind() != codec_.kind() || codec.bits() != codec_.bits() || codec.stochastic() != codec_.stochastic() ||
      codec.chunk() != codec_.chunk() || codec.error_feedback() != codec_.error_feedback() ||
      codec.hierarchical() != codec_.hierarchical())
    fail(BAGUA_ERR_INVALID_ARGUMENT, "cfg differs from the one the state was created with");
  if (check_busy && (busy || queued > 0))  // (a host call must not share it with a queued device call)
    fail(BAGUA_ERR_INVALID_USAGE, "state is in use by an operation that has not completed");
}

void QuantizedState::residual(float* out) const {
  int out_device = -1;
  const bool out_on_host = device_runtime().memory_type(out, &out_device) == MemoryType::kHost;
  std::vector<float> staged(out_on_host ? 0 : count_);
  float* sum = out_on_host ? out : staged.data();
  std::fill(sum, sum + count_, 0.0f);
  if (worker_error_ptr_ != nullptr) {
    std::memcpy(sum, worker_error_ptr_, count_ * sizeof(float));
    size_t offset = group_.block_offset(count_, group_.index);
    if (owner_error_ptr_ != worker_error_ptr_ + offset)  // (else one shared array)
      for (size_t i = 0; i < owner_error_.size(); ++i) sum[offset + i] += owner_error_[i];
  }
  if (!out_on_host) device_runtime().copy_from_host_to_any(out, sum, count_ * sizeof(float), timeout_ms_);
}

}  // namespace bagua

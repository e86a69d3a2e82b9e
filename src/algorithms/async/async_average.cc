#include "algorithms/async/async_average.h"

#include <chrono>
#include <cstring>

#include "algorithms/dispatch.h"
#include "base/error.h"
#include "base/logging.h"
#include "kernels/cpu/reduce.h"
#include "kernels/dtype.h"

namespace bagua {

AsyncAverager::AsyncAverager(std::unique_ptr<Comm> comm, void* buf, size_t count, bagua_datatype_t dtype,
                             int interval_ms, int device)
    : comm_(std::move(comm)), buf_(buf), count_(count), dtype_(dtype), interval_ms_(interval_ms), device_(device) {
  if (device_ >= 0) {
    DeviceRuntime& runtime = device_runtime();
    const size_t bytes = count_ * datatype_size(dtype_);
    stream_ = runtime.create_stream(device_);
    try {
      device_snapshot_ = runtime.alloc_device_async(bytes, stream_);
      device_sum_ = device_snapshot_ ? runtime.alloc_device_async(bytes, stream_) : nullptr;
    } catch (...) {
    }
    if (device_sum_ == nullptr) {
      runtime.free_device_async(device_snapshot_, stream_);
      runtime.destroy_stream(stream_);
      fail(BAGUA_ERR_SYSTEM, "out of memory: could not allocate 2 x {} bytes of device memory for averaging", bytes);
    }
  }
  thread_ = std::thread([this] { run(); });
}

void AsyncAverager::read_buf(void* host, size_t bytes) {
  if (device_ < 0) return static_cast<void>(std::memcpy(host, buf_, bytes));
  device_runtime().copy_async(host, buf_, bytes, stream_);
  device_runtime().synchronize(stream_, comm_->config().timeout_ms);
}

AsyncAverager::~AsyncAverager() {
  if (thread_.joinable()) {
    {
      std::lock_guard<std::mutex> guard(wake_mutex_);
      stop_requested_ = true;
    }
    wake_.notify_all();
    thread_.join();
  }
  if (stream_ != nullptr) {
    device_runtime().free_device_async(device_snapshot_, stream_);
    device_runtime().free_device_async(device_sum_, stream_);
    device_runtime().destroy_stream(stream_);
  }
}

void AsyncAverager::lock() {
  if (holder_.load() == std::this_thread::get_id())
    fail(BAGUA_ERR_INVALID_USAGE, "this thread already holds the averaging lock");
  user_mutex_.lock();
  holder_ = std::this_thread::get_id();
}

void AsyncAverager::unlock() {
  if (holder_.load() != std::this_thread::get_id())
    fail(BAGUA_ERR_INVALID_USAGE, "this thread does not hold the averaging lock");
  holder_ = std::thread::id{};
  user_mutex_.unlock();
}

template <typename T>
void AsyncAverager::average_round(std::vector<T>& snapshot, std::vector<T>& sum, bool& stop_all) {
  const size_t bytes = count_ * sizeof(T);
  {
    std::lock_guard<std::mutex> guard(user_mutex_);
    if (device_ >= 0) device_runtime().copy_async(device_snapshot_, buf_, bytes, stream_);  // for the correction
    read_buf(snapshot.data(), bytes);
  }
  snapshot[count_] = stop_requested_.load() ? T(1) : T(0);  // this rank's stop vote
  allreduce_now(*comm_, snapshot.data(), sum.data(), count_ + 1, dtype_, BAGUA_SUM);
  stop_all = sum[count_] > T(0);
  std::lock_guard<std::mutex> guard(user_mutex_);
  // x += sum / n - snapshot keeps the caller's updates since the snapshot. On the device: a kernel on this thread's
  // stream, with the snapshot kept there and only the sum copied in.
  if (device_ >= 0) {
    DeviceRuntime& runtime = device_runtime();
    runtime.copy_async(device_sum_, sum.data(), bytes, stream_);
    runtime.average_correct_async(buf_, device_sum_, device_snapshot_, count_, dtype_, comm_->size(), stream_);
    runtime.synchronize(stream_, comm_->config().timeout_ms);
    return;
  }
  average_correct(buf_, sum.data(), snapshot.data(), count_, dtype_, comm_->size());
}

void AsyncAverager::run() {
  set_log_rank(comm_->rank());
  try {
    if (device_ >= 0) {
      device_runtime().enter_library_thread();
      device_runtime().set_device(device_);
    }
    std::vector<float> sf, rf;
    std::vector<double> sd, rd;
    if (dtype_ == BAGUA_FLOAT64)
      sd.resize(count_ + 1), rd.resize(count_ + 1);
    else
      sf.resize(count_ + 1), rf.resize(count_ + 1);
    for (;;) {
      bool stop_all = false;
      if (dtype_ == BAGUA_FLOAT64)
        average_round(sd, rd, stop_all);
      else
        average_round(sf, rf, stop_all);
      rounds_.fetch_add(1);
      if (stop_all) break;
      std::unique_lock<std::mutex> wait_lock(wake_mutex_);
      wake_.wait_for(wait_lock, std::chrono::milliseconds(interval_ms_), [this] { return stop_requested_.load(); });
    }
  } catch (const Error& e) {
    status_ = e.status();
    error_ = e.what();
  } catch (const std::exception& e) {
    status_ = BAGUA_ERR_INTERNAL;
    error_ = e.what();
  }
}

bagua_status_t AsyncAverager::stop(std::string* message) {
  if (holder_.load() == std::this_thread::get_id())
    fail(BAGUA_ERR_INVALID_USAGE, "stop while holding the averaging lock would wait forever: unlock first");
  {
    std::lock_guard<std::mutex> guard(wake_mutex_);
    stop_requested_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
  if (message) *message = error_;
  return status_;
}

}  // namespace bagua

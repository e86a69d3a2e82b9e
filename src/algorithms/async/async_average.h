// Asynchronous model averaging: a background thread repeatedly sets x += avg(snapshot) - snapshot over its
// own communicator, so the caller's collectives are not disturbed. Each round's allreduce also carries a stop
// vote (one extra element); when any rank has voted, every rank's thread ends after that same round, so
// stopping needs no extra agreement step and never hangs, whenever each rank calls stop.
#pragma once

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/comm.h"
#include "kernels/device_runtime.h"

namespace bagua {

class AsyncAverager {
 public:
  // device >= 0: buf is device memory of that device, read and corrected (a kernel) by the averaging thread's own
  // stream under the lock (the caller's stream work on buf must be done before it unlocks).
  AsyncAverager(std::unique_ptr<Comm> comm, void* buf, size_t count, bagua_datatype_t dtype, int interval_ms,
                int device = -1);
  ~AsyncAverager();
  // The caller's guard around its updates. unlock() by a thread that does not hold it, or stop() while
  // holding it, is refused (INVALID_USAGE): stop() would wait forever for the averaging thread.
  void lock();
  void unlock();
  uint64_t rounds() const { return rounds_.load(); }
  // Votes to stop, waits for the thread; returns its error status (and message) if it failed.
  bagua_status_t stop(std::string* message);

 private:
  void run();
  template <typename T>
  void average_round(std::vector<T>& snapshot, std::vector<T>& sum, bool& stop_all);
  // buf into host memory: a memcpy, or a copy on the thread's stream for a device buffer.
  void read_buf(void* host, size_t bytes);

  std::unique_ptr<Comm> comm_;
  void* buf_;
  size_t count_;
  bagua_datatype_t dtype_;
  int interval_ms_;
  int device_ = -1;
  void* stream_ = nullptr;           // device buf: the averaging thread's stream
  void* device_snapshot_ = nullptr;  // device buf: the round's snapshot and the allreduced sum, on its device
  void* device_sum_ = nullptr;
  std::mutex user_mutex_;
  std::atomic<std::thread::id> holder_{};
  std::mutex wake_mutex_;
  std::condition_variable wake_;
  std::atomic<bool> stop_requested_{false};
  std::atomic<uint64_t> rounds_{0};
  bagua_status_t status_ = BAGUA_SUCCESS;
  std::string error_;
  std::thread thread_;
};

}  // namespace bagua

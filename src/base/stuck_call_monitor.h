// A thread that watches another thread's calls into something that may block indefinitely (the CUDA driver, when a
// user thread waits inside it for a stream that only the watched thread can release; docs/cuda.md, "What a parked
// stream blocks"). When one call has not returned within the limit while waiting() says someone waits on the
// watched thread, it calls release(stuck_ms) once. It makes no such call itself.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>

namespace bagua {

class StuckCallMonitor {
 public:
  StuckCallMonitor(int64_t limit_ms, std::function<bool()> waiting, std::function<void(int64_t)> release);
  ~StuckCallMonitor();
  StuckCallMonitor(const StuckCallMonitor&) = delete;
  StuckCallMonitor& operator=(const StuckCallMonitor&) = delete;

  // The watched thread is inside a call for the guard's lifetime (not nested).
  class Call {
   public:
    explicit Call(StuckCallMonitor* monitor);
    ~Call();
    Call(const Call&) = delete;
    Call& operator=(const Call&) = delete;

   private:
    StuckCallMonitor* monitor_;
  };
  bool fired() const { return fired_.load(); }

 private:
  void run();

  const int64_t limit_ns_;
  std::function<bool()> waiting_;
  std::function<void(int64_t)> release_;
  std::atomic<int64_t> inside_since_ns_{0};  // 0: not inside a call
  std::atomic<bool> fired_{false};
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace bagua

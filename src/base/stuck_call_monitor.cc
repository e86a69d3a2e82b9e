#include "base/stuck_call_monitor.h"

#include <chrono>

namespace bagua {

namespace {

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

StuckCallMonitor::StuckCallMonitor(int64_t limit_ms, std::function<bool()> waiting,
                                   std::function<void(int64_t)> release)
    : limit_ns_(limit_ms * 1000000), waiting_(std::move(waiting)), release_(std::move(release)) {
  thread_ = std::thread([this] { run(); });
}

StuckCallMonitor::~StuckCallMonitor() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

StuckCallMonitor::Call::Call(StuckCallMonitor* monitor) : monitor_(monitor) {
  if (monitor_ != nullptr) monitor_->inside_since_ns_.store(now_ns());
}

StuckCallMonitor::Call::~Call() {
  if (monitor_ != nullptr) monitor_->inside_since_ns_.store(0);
}

void StuckCallMonitor::run() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stopping_ && !fired_.load()) {
    wake_.wait_for(lock, std::chrono::milliseconds(100));
    if (stopping_) return;
    const int64_t since = inside_since_ns_.load();
    if (since == 0 || now_ns() - since < limit_ns_ || !waiting_()) continue;
    fired_.store(true);
    lock.unlock();
    release_((now_ns() - since) / 1000000);
    lock.lock();
  }
}

}  // namespace bagua

#include "core/idle_progress.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "base/logging.h"
#include "core/comm.h"

namespace bagua {

namespace {

struct IdleProgress {
  std::mutex mutex;  // comms, seen, stop; held by the thread during a pass
  std::condition_variable wake;
  std::vector<Comm*> comms;
  std::vector<uint64_t> seen;  // per communicator: its engine passes at the last look
  bool stop = false;
  std::mutex lifecycle;  // starting and joining the thread
  std::unique_ptr<std::thread> thread;
  pid_t thread_pid = 0;  // a forked child inherits the handle, not the thread

  void run() {
    std::unique_lock<std::mutex> lock(mutex);
    while (!stop) {
      wake.wait_for(lock, std::chrono::milliseconds(kIdleProgressIntervalMs), [&] { return stop; });
      if (stop) break;
      for (size_t i = 0; i < comms.size(); ++i) comms[i]->progress_transport_idle(&seen[i]);
    }
  }

  // In a forked child: the parent's thread and communicators are not this process's to touch.
  void forget_parent() {
    if (!thread || thread_pid == getpid()) return;
    (void)thread.release();  // (joining or detaching another process's thread is undefined)
    std::lock_guard<std::mutex> lock(mutex);
    comms.clear();
    seen.clear();
  }
};

IdleProgress& state() {
  static auto* s = new IdleProgress;  // never destroyed: communicators may outlive static destruction
  return *s;
}

}  // namespace

void idle_progress_add(Comm* comm) {
  IdleProgress& s = state();
  std::lock_guard<std::mutex> life(s.lifecycle);
  s.forget_parent();
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    s.comms.push_back(comm);
    s.seen.push_back(UINT64_MAX);
    s.stop = false;
  }
  if (s.thread) return;
  try {
    s.thread = std::make_unique<std::thread>([&s] { s.run(); });
    s.thread_pid = getpid();
  } catch (const std::exception& e) {  // (no thread: calls still work; a stalled peer waits for this rank's next call)
    BAGUA_WARN("no idle-progress thread: {}", e.what());
  }
}

void idle_progress_remove(Comm* comm) {
  IdleProgress& s = state();
  std::lock_guard<std::mutex> life(s.lifecycle);
  s.forget_parent();
  {
    std::lock_guard<std::mutex> lock(s.mutex);  // waits for a pass under way
    auto it = std::find(s.comms.begin(), s.comms.end(), comm);
    if (it == s.comms.end()) return;
    s.seen.erase(s.seen.begin() + (it - s.comms.begin()));
    s.comms.erase(it);
    if (!s.comms.empty()) return;
    s.stop = true;
  }
  s.wake.notify_all();
  if (s.thread) s.thread->join();
  s.thread.reset();
}

}  // namespace bagua

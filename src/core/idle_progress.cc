#include "core/idle_progress.h"

#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
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
  bool exiting = false;  // exit() has begun: no thread any more

  void run() {
    std::unique_lock<std::mutex> lock(mutex);
    while (!stop) {
      wake.wait_for(lock, std::chrono::milliseconds(kIdleProgressIntervalMs), [&] { return stop; });
      if (stop) break;
      for (size_t i = 0; i < comms.size(); ++i) comms[i]->progress_transport_idle(&seen[i]);
    }
  }

  // Stops and joins the thread; lifecycle held.
  void stop_thread() {
    {
      std::lock_guard<std::mutex> lock(mutex);
      stop = true;
    }
    wake.notify_all();
    if (thread) thread->join();
    thread.reset();
  }
};

std::atomic<IdleProgress*> g_state{nullptr};

// Before the libraries' destructors (UCX's among them) run at exit, with communicators the program never destroyed.
void stop_at_exit() {
  IdleProgress& s = *g_state.load();
  std::lock_guard<std::mutex> life(s.lifecycle);
  s.exiting = true;
  s.stop_thread();
}

// fork() waits for a pass under way, so that no transport lock or UCX worker lock is held by the thread, which a
// child would inherit locked. The child has the parent's state but not its thread: it starts afresh (the old state is
// left as it is).
IdleProgress* g_forking = nullptr;
void before_fork() {
  g_forking = g_state.load();
  g_forking->mutex.lock();
}
void after_fork_in_parent() { g_forking->mutex.unlock(); }
void after_fork_in_child() { g_state.store(new IdleProgress); }

IdleProgress& state() {
  static const bool installed = [] {
    g_state.store(new IdleProgress);  // never destroyed: see stop_at_exit
    std::atexit(stop_at_exit);
    pthread_atfork(before_fork, after_fork_in_parent, after_fork_in_child);
    return true;
  }();
  (void)installed;
  return *g_state.load();
}

}  // namespace

void idle_progress_add(Comm* comm) {
  IdleProgress& s = state();
  std::lock_guard<std::mutex> life(s.lifecycle);
  if (s.exiting) return;
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    s.comms.push_back(comm);
    s.seen.push_back(UINT64_MAX);
    s.stop = false;
  }
  if (s.thread) return;
  try {
    s.thread = std::make_unique<std::thread>([&s] { s.run(); });
  } catch (const std::exception& e) {  // (no thread: calls still work; a stalled peer waits for this rank's next call)
    BAGUA_WARN("no idle-progress thread: {}", e.what());
  }
}

void idle_progress_remove(Comm* comm) {
  IdleProgress& s = state();
  std::lock_guard<std::mutex> life(s.lifecycle);
  {
    std::lock_guard<std::mutex> lock(s.mutex);  // waits for a pass under way
    auto it = std::find(s.comms.begin(), s.comms.end(), comm);
    if (it == s.comms.end()) return;
    s.seen.erase(s.seen.begin() + (it - s.comms.begin()));
    s.comms.erase(it);
    if (!s.comms.empty()) return;
  }
  s.stop_thread();
}

}  // namespace bagua

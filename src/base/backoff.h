// Waiting politely: spin while work flows, yield the core after a while (ranks may outnumber cores), then
// nap briefly. Call idle() after a round that made no progress and busy() after one that did.
#pragma once

#include <sched.h>

#include <unistd.h>
#include <atomic>

namespace bagua {

class Backoff {
 public:
  // More ranks than cores on this host (set at init): a spinning waiter keeps a peer from running, so yield the
  // core at once instead of after kYieldAfter rounds. Process-wide; it never goes back.
  static void set_oversubscribed() { oversubscribed_flag().store(true, std::memory_order_relaxed); }
  static bool oversubscribed() { return oversubscribed_flag().load(std::memory_order_relaxed); }

  void busy() { idle_rounds_ = 0; }
  void idle() {
    ++idle_rounds_;
    if (idle_rounds_ > kNapAfter)
      usleep(50);
    else if (idle_rounds_ > kYieldAfter || oversubscribed())
      sched_yield();
  }

 private:
  static constexpr unsigned kYieldAfter = 200;
  static constexpr unsigned kNapAfter = 20000;
  unsigned idle_rounds_ = 0;
  static std::atomic<bool>& oversubscribed_flag() {
    static std::atomic<bool> flag{false};
    return flag;
  }
};

}  // namespace bagua

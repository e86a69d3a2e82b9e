// Taking a mutex with a time limit, for the paths (abort, failure, dumping the trace) that must not wait forever on
// a progress engine that is stuck.
#pragma once

#include <chrono>
#include <mutex>

#if defined(__SANITIZE_THREAD__)
#include <pthread.h>

#include <ctime>
#endif

namespace bagua {

// The lock of m, held if it was taken within timeout.
inline std::unique_lock<std::timed_mutex> lock_within(std::timed_mutex& m, std::chrono::milliseconds timeout) {
#if defined(__SANITIZE_THREAD__)
  // try_lock_for calls pthread_mutex_clocklock, which GCC 12's ThreadSanitizer does not intercept: it would not see
  // the lock and report races under it. pthread_mutex_timedlock (on the system clock) it sees.
  timespec until{};
  clock_gettime(CLOCK_REALTIME, &until);
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(timeout).count() + until.tv_nsec;
  until.tv_sec += static_cast<time_t>(ns / 1000000000);
  until.tv_nsec = static_cast<long>(ns % 1000000000);
  if (pthread_mutex_timedlock(m.native_handle(), &until) == 0)
    return std::unique_lock<std::timed_mutex>(m, std::adopt_lock);
  return std::unique_lock<std::timed_mutex>(m, std::defer_lock);
#else
  std::unique_lock<std::timed_mutex> lock(m, std::defer_lock);
  (void)lock.try_lock_for(timeout);
  return lock;
#endif
}

}  // namespace bagua

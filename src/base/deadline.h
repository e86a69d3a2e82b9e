// A point in time after which a wait gives up. Every blocking wait in bagua takes one.
#pragma once

#include <algorithm>
#include <chrono>
#include <ctime>

namespace bagua {

using Clock = std::chrono::steady_clock;

// The monotonic clock at the kernel tick's resolution (1-10 ms), read without the timestamp counter: for watchdogs
// and throttles on the path of every call, which count in milliseconds or more.
struct CoarseClock {
  using duration = std::chrono::nanoseconds;
  using rep = duration::rep;
  using period = duration::period;
  using time_point = std::chrono::time_point<CoarseClock>;
  static constexpr bool is_steady = true;
  static time_point now() noexcept {
    timespec ts{};
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return time_point(std::chrono::seconds(ts.tv_sec) + std::chrono::nanoseconds(ts.tv_nsec));
  }
};

class Deadline {
 public:
  static Deadline after_ms(long long ms) { return Deadline(Clock::now() + std::chrono::milliseconds(ms)); }
  explicit Deadline(Clock::time_point when) : when_(when) {}
  bool expired() const { return Clock::now() >= when_; }
  // Milliseconds left, clamped to [0, cap]; for poll().
  int remaining_ms(int cap = 1 << 30) const {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(when_ - Clock::now()).count();
    return static_cast<int>(std::clamp<long long>(left + 1, 0, cap));
  }
  Clock::time_point when() const { return when_; }
  Deadline earlier(const Deadline& other) const { return Deadline(std::min(when_, other.when_)); }

 private:
  Clock::time_point when_;
};

}  // namespace bagua

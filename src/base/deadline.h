// A point in time after which a wait gives up. Every blocking wait in bagua takes one.
#pragma once

#include <algorithm>
#include <chrono>

namespace bagua {

using Clock = std::chrono::steady_clock;

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

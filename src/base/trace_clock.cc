#include "base/trace_clock.h"

#include <chrono>

#if defined(__x86_64__)
#include <cpuid.h>
#include <x86intrin.h>
#endif

namespace bagua::trace_clock {

namespace {

int64_t system_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

bool counter_is_invariant() {
#if defined(__x86_64__)
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid(0x80000000u, &eax, &ebx, &ecx, &edx) == 0 || eax < 0x80000007u) return false;
  __get_cpuid(0x80000007u, &eax, &ebx, &ecx, &edx);
  return (edx & (1u << 8)) != 0;
#else
  return false;
#endif
}

uint64_t counter() {
#if defined(__x86_64__)
  return __rdtsc();
#else
  return 0;
#endif
}

// The counter, the system clock and the steady clock read together once, at the process's first stamp.
struct Anchor {
  bool counter;
  uint64_t ticks;
  int64_t epoch_us;
  int64_t steady;
};

const Anchor& anchor() {
  static const Anchor a = [] {
    const bool invariant = counter_is_invariant();
    return Anchor{invariant, invariant ? counter() : 0, system_us(), steady_ns()};
  }();
  return a;
}

}  // namespace

uint64_t now() {
  const Anchor& a = anchor();
  return a.counter ? counter() : static_cast<uint64_t>(system_us());
}

int64_t to_epoch_us(uint64_t stamp) {
  const Anchor& a = anchor();
  if (!a.counter) return static_cast<int64_t>(stamp);
  const uint64_t ticks_now = counter();
  const int64_t ns_now = steady_ns();
  if (ticks_now <= a.ticks || ns_now <= a.steady) return a.epoch_us;
  // ns per tick over the whole span since the anchor: the reads' jitter stays within a microsecond of any stamp.
  const double ns_per_tick = static_cast<double>(ns_now - a.steady) / static_cast<double>(ticks_now - a.ticks);
  const double since = (static_cast<double>(stamp) - static_cast<double>(a.ticks)) * ns_per_tick;
  return a.epoch_us + static_cast<int64_t>(since / 1000.0);
}

}  // namespace bagua::trace_clock

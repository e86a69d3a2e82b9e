// The flight recorder's clock: stamps never go back, read as the system clock's microseconds, and measure an
// interval as the steady clock does (within 2 ms either way on a busy machine).
#include <catch2/catch.hpp>

#include <chrono>
#include <thread>

#include "base/trace_clock.h"

using namespace bagua;

namespace {
int64_t system_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}
}  // namespace

TEST_CASE("trace clock stamps read as epoch microseconds", "[trace_clock]") {
  uint64_t last = trace_clock::now();
  for (int i = 0; i < 1000; ++i) {
    const uint64_t stamp = trace_clock::now();
    REQUIRE(stamp >= last);
    last = stamp;
  }
  const int64_t before = system_us();
  const uint64_t first = trace_clock::now();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const uint64_t second = trace_clock::now();
  const int64_t after = system_us();
  const int64_t a = trace_clock::to_epoch_us(first), b = trace_clock::to_epoch_us(second);
  CHECK(a >= before - 2000);
  CHECK(b <= after + 2000);
  CHECK(b - a >= 18000);
  CHECK(b - a <= after - before + 2000);
}

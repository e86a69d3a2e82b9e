// Timestamps that are cheap to take and read as microseconds since the epoch later: the flight recorder stamps
// every operation twice. Where the CPU's time-stamp counter is invariant (x86-64, CPUID says so) a stamp is the
// counter (about 8 ns on the development VM, against about 30 ns for the system clock); elsewhere it is the system
// clock in microseconds.
#pragma once

#include <cstdint>

namespace bagua {

namespace trace_clock {

uint64_t now();
// A stamp of now() as microseconds since the epoch. Counter stamps are scaled by the counter's rate over the time
// since the first stamp of the process, measured against the steady clock when this is called.
int64_t to_epoch_us(uint64_t stamp);

}  // namespace trace_clock

}  // namespace bagua

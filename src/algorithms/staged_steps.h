// A host operation's side of pipelined staging (core/staging_window.h): which staging bytes each of its steps
// touches, whether they have arrived, and after which step each output piece is final. Steps are numbered in the
// order they run and finish in that order (a schedule's prologue and rounds, a ring's units).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/staging_window.h"

namespace bagua {

class StagedSteps {
 public:
  StagedSteps(StagingWindow& window, size_t steps);
  // Step `step` reads or writes [data, data + bytes); writes makes it a writer of the output pieces it overlaps.
  void touch(size_t step, const void* data, size_t bytes, bool writes);
  // Every input piece the step touches has been copied in.
  bool arrived(size_t step) const;
  // After the last touch: the output pieces no step writes are final now.
  void release_unwritten();
  // The step has finished: the output pieces whose last writer it is are final.
  void finished(size_t step);

 private:
  StagingWindow& window_;
  std::vector<std::vector<StagingWindow::Range>> touched_;
  std::vector<long> last_writer_;  // per output piece; -1: no step writes it
};

}  // namespace bagua

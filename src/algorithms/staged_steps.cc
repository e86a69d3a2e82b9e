#include "algorithms/staged_steps.h"

#include <algorithm>

namespace bagua {

StagedSteps::StagedSteps(StagingWindow& window, size_t steps)
    : window_(window), touched_(steps), last_writer_(window.output_pieces().size(), -1) {}

void StagedSteps::touch(size_t step, const void* data, size_t bytes, bool writes) {
  if (bytes == 0 || data == nullptr) return;
  const auto* lo = static_cast<const uint8_t*>(data);
  touched_[step].push_back({lo, bytes});
  if (!writes) return;
  const auto& pieces = window_.output_pieces();
  for (size_t p = 0; p < pieces.size(); ++p)
    if (lo < pieces[p].data + pieces[p].bytes && pieces[p].data < lo + bytes)
      last_writer_[p] = std::max(last_writer_[p], static_cast<long>(step));
}

bool StagedSteps::arrived(size_t step) const { return window_.arrived(touched_[step]); }

void StagedSteps::release_unwritten() {
  for (size_t p = 0; p < last_writer_.size(); ++p)
    if (last_writer_[p] < 0) window_.output_final(p, true);
}

void StagedSteps::finished(size_t step) {
  for (size_t p = 0; p < last_writer_.size(); ++p)
    if (last_writer_[p] == static_cast<long>(step)) window_.output_final(p, step + 1 < touched_.size());
}

}  // namespace bagua

// A span of device-reachable memory whose address a stream learns only when it runs the work (docs/cuda.md, "The IPC
// path on the caller's stream"): the 64-bit word at `base`, in mapped pinned host memory (alloc_mapped), plus
// `offset` bytes. The host writes the word before it lets the stream reach the work; a word of 0 then skips it.
// A copy's or reduction's spans must not overlap (a reduction's first source may be its first destination).
#pragma once

#include <cstdint>

namespace bagua {

struct LateSpan {
  const uint64_t* base;
  uint64_t offset;
};

}  // namespace bagua

// Scratch memory reused across operations. Large allocations come straight from mmap and go back on
// free, so a fresh buffer per call pays a page fault per 4 KiB on first touch (25 ms for the 48 MiB of
// a 64 MiB quantized allreduce). take() hands out a cached buffer when one is large enough (the smallest, and
// of equal ones the last returned); the buffer comes back to the cache when its last owner drops it. Buffers
// are never shared while held; a cached buffer serves requests of at least half its size.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

namespace bagua {

// A buffer of at least `bytes` bytes (uninitialized), owned by the caller until it drops the pointer.
std::shared_ptr<uint8_t[]> take_scratch(size_t bytes);

// Frees every cached buffer; buffers still held are freed when they come back, until the next
// take_scratch. Called when the last communicator is destroyed.
void release_scratch_cache();

// Bytes cached now (not counting buffers in use).
size_t scratch_cache_bytes();

}  // namespace bagua

// Ring rank arithmetic: neighbours, chunk boundaries and the chunk each step sends and receives.
// Pure functions, no I/O (tests/unit/test_patterns.cc).
#pragma once

#include <cstddef>

namespace bagua::ring {

inline int next(int rank, int nranks) { return (rank + 1) % nranks; }
inline int prev(int rank, int nranks) { return (rank + nranks - 1) % nranks; }
inline int wrap(long long i, int nranks) { return static_cast<int>(((i % nranks) + nranks) % nranks); }

// count elements split into nranks contiguous chunks whose sizes differ by at most one (larger first).
inline size_t chunk_begin(size_t count, int nranks, int chunk) {
  size_t base = count / nranks;
  size_t extra = count % nranks;
  size_t c = static_cast<size_t>(chunk);
  return c * base + (c < extra ? c : extra);
}
inline size_t chunk_size(size_t count, int nranks, int chunk) {
  return count / nranks + (static_cast<size_t>(chunk) < count % nranks ? 1 : 0);
}

// Reduce-scatter step s (0 <= s < n-1): send chunk rank-s, receive chunk rank-s-1 and reduce it.
// After n-1 steps this rank holds the full reduction of chunk rank+1.
inline int reduce_scatter_send_chunk(int rank, int nranks, int step) { return wrap(rank - step, nranks); }
inline int reduce_scatter_recv_chunk(int rank, int nranks, int step) { return wrap(rank - step - 1, nranks); }
inline int reduce_scatter_owned_chunk(int rank, int nranks) { return wrap(rank + 1, nranks); }

// Allgather step s (0 <= s < n-1), starting from the owned chunk rank+1: send chunk rank+1-s, receive rank-s.
inline int allgather_send_chunk(int rank, int nranks, int step) { return wrap(rank + 1 - step, nranks); }
inline int allgather_recv_chunk(int rank, int nranks, int step) { return wrap(rank - step, nranks); }

}  // namespace bagua::ring

// Recursive doubling / halving on any nranks (pure functions). The first 2*rem ranks (rem = n - p, p the
// largest power of two <= n) fold in pairs: odd rank r hands its data to r-1 and sits out the core; the
// remaining p "core" ranks are numbered 0..p-1 and exchange with partner core ^ distance.
#pragma once

namespace bagua::recursive {

inline int core_size(int nranks) {
  int p = 1;
  while (p * 2 <= nranks) p *= 2;
  return p;
}
inline int folded(int nranks) { return nranks - core_size(nranks); }  // rem: number of folded pairs

// Core number of a rank, or -1 for an odd rank that sits out.
inline int core_rank(int rank, int nranks) {
  int rem = folded(nranks);
  if (rank < 2 * rem) return rank % 2 == 0 ? rank / 2 : -1;
  return rank - rem;
}
inline int real_rank(int core, int nranks) {
  int rem = folded(nranks);
  return core < rem ? core * 2 : core + rem;
}

}  // namespace bagua::recursive

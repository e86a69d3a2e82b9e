// Binomial trees rooted anywhere, in relative ranks vr = (rank - root) mod n. Pure functions.
// Broadcast round i (of ceil_log2(n)) uses mask = 2^(L-1-i): vr with vr % 2mask == 0 sends to vr + mask,
// vr with vr % 2mask == mask receives from vr - mask. Reduce runs the same rounds backwards.
#pragma once

namespace bagua::binomial {

inline int ceil_log2(int n) {
  int levels = 0;
  while ((1 << levels) < n) ++levels;
  return levels;
}
inline int relative(int rank, int root, int nranks) { return (rank - root + nranks) % nranks; }
inline int absolute(int vrank, int root, int nranks) { return (vrank + root) % nranks; }

// The mask used in broadcast round `round` on n ranks.
inline int broadcast_mask(int round, int nranks) { return 1 << (ceil_log2(nranks) - 1 - round); }

// In a round with this mask: the relative rank vr sends to (returns >= 0) / receives from.
inline int send_to(int vr, int mask, int nranks) {
  return (vr % (2 * mask) == 0 && vr + mask < nranks) ? vr + mask : -1;
}
inline int receive_from(int vr, int mask) { return (vr % (2 * mask) == mask) ? vr - mask : -1; }

}  // namespace bagua::binomial

// Under bagua-run -n 2: an allreduce of more than 2^31 elements (uint8, in place), checked element by element.
// Oracle: element i on rank r is (i * 7 + r) % 3, so every sum is at most 2 * nranks and exact.
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "mp/mp_check.h"

int main() {
  const size_t count = (size_t(1) << 31) + 1001;
  bagua_comm_t comm = nullptr;
  MP_OK(bagua_comm_init_from_env(&comm));
  int rank = 0, size = 0;
  MP_OK(bagua_comm_rank(comm, &rank));
  MP_OK(bagua_comm_size(comm, &size));
  auto* buf = static_cast<uint8_t*>(std::malloc(count));
  MP_CHECK(buf != nullptr);
  for (size_t i = 0; i < count; ++i) buf[i] = static_cast<uint8_t>((i * 7 + rank) % 3);
  auto start = std::chrono::steady_clock::now();
  MP_OK(bagua_allreduce(buf, buf, count, BAGUA_UINT8, BAGUA_SUM, comm, nullptr));
  double seconds = mp_seconds_since(start);
  for (size_t i = 0; i < count; ++i) {
    unsigned want = 0;
    for (int r = 0; r < size; ++r) want += static_cast<unsigned>((i * 7 + r) % 3);
    if (buf[i] != want) {
      std::fprintf(stderr, "rank %d: element %zu is %u, expected %u\n", rank, i, buf[i], want);
      return 1;
    }
  }
  if (rank == 0) std::printf("allreduce of %zu uint8 on %d ranks: exact, %.2f s\n", count, size, seconds);
  std::free(buf);
  MP_OK(bagua_comm_destroy(comm));
  return 0;
}

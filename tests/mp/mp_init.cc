// Under bagua-run -n N: every rank forms the communicator, sees the right rank/size/local values,
// passes barriers, forms a second communicator, and destroys both.
#include <unistd.h>

#include "mp/mp_check.h"

int main() {
  bagua_comm_t comm = nullptr;
  MP_OK(bagua_comm_init_from_env(&comm));
  int rank = -1, size = -1, local_rank = -1, local_size = -1;
  MP_OK(bagua_comm_rank(comm, &rank));
  MP_OK(bagua_comm_size(comm, &size));
  MP_OK(bagua_comm_local_rank(comm, &local_rank));
  MP_OK(bagua_comm_local_size(comm, &local_size));
  MP_CHECK(rank == mp_env_int("BAGUA_RANK"));
  MP_CHECK(size == mp_env_int("BAGUA_WORLD_SIZE"));
  // bagua-run starts every rank on this host, so local values equal global ones.
  MP_CHECK(local_rank == rank);
  MP_CHECK(local_size == size);
  for (int i = 0; i < 20; ++i) {
    // Stagger the ranks so the barrier really waits.
    if (i % 5 == 0) usleep(1000 * rank);
    MP_OK(bagua_barrier(comm, nullptr));
  }
  // A second communicator from the environment forms alongside the first.
  bagua_comm_t second = nullptr;
  MP_OK(bagua_comm_init_from_env(&second));
  int second_rank = -1;
  MP_OK(bagua_comm_rank(second, &second_rank));
  MP_CHECK(second_rank == rank);
  MP_OK(bagua_barrier(second, nullptr));
  MP_OK(bagua_barrier(comm, nullptr));
  MP_OK(bagua_comm_destroy(second));
  MP_OK(bagua_barrier(comm, nullptr));
  MP_OK(bagua_comm_destroy(comm));
  return 0;
}

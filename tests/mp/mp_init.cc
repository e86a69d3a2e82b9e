// Under bagua-run -n N: every rank forms the communicator, sees the right rank/size/local values,
// passes barriers, forms a second communicator (after a refused attempt on the last rank) and a split of every rank
// in reverse order, and destroys them.
#include <unistd.h>

#include <cstdlib>
#include <cstring>

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
  // A second communicator from the environment forms alongside the first. On the last rank a first attempt with a
  // bad BAGUA_ALGO is refused before the rendezvous and takes no job number, so its retry joins the others' job.
  bagua_comm_t second = nullptr;
  if (rank == size - 1) {
    setenv("BAGUA_ALGO", "allreduce:no_such_algorithm", 1);
    MP_CHECK(bagua_comm_init_from_env(&second) == BAGUA_ERR_INVALID_USAGE);
    MP_CHECK(std::strstr(bagua_get_last_error(nullptr), "BAGUA_ALGO") != nullptr);
    MP_CHECK(second == nullptr);
    unsetenv("BAGUA_ALGO");
  }
  MP_OK(bagua_comm_init_from_env(&second));
  int second_rank = -1;
  MP_OK(bagua_comm_rank(second, &second_rank));
  MP_CHECK(second_rank == rank);
  MP_OK(bagua_barrier(second, nullptr));
  MP_OK(bagua_barrier(comm, nullptr));
  // A split with every rank takes its parent's measured shared-copy factor instead of timing again
  // (calibration_check.sh counts the log lines).
  bagua_comm_t everyone = nullptr;
  MP_OK(bagua_comm_split(comm, 0, size - 1 - rank, &everyone));
  int everyone_rank = -1;
  MP_OK(bagua_comm_rank(everyone, &everyone_rank));
  MP_CHECK(everyone_rank == size - 1 - rank);
  MP_OK(bagua_barrier(everyone, nullptr));
  MP_OK(bagua_comm_destroy(everyone));
  MP_OK(bagua_comm_destroy(second));
  MP_OK(bagua_barrier(comm, nullptr));
  MP_OK(bagua_comm_destroy(comm));
  return 0;
}

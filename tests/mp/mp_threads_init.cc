// Ranks as threads of one process, joined by a unique id: 1 to 4 ranks, plus two communicators used
// from different threads at the same time.
#include <atomic>
#include <thread>
#include <vector>

#include "mp/mp_check.h"

namespace {
void run_job(int nranks, const char* name) {
  bagua_unique_id_t id;
  MP_OK(bagua_get_unique_id(&id));
  std::atomic<int> failures(0);
  std::vector<std::thread> threads;
  for (int r = 0; r < nranks; ++r) {
    threads.emplace_back([&, r] {
      bagua_config_t config = BAGUA_CONFIG_INITIALIZER;
      config.timeout_ms = 20000;
      config.comm_name = name;
      bagua_comm_t comm = nullptr;
      if (bagua_comm_init_rank_config(&comm, nranks, id, r, &config) != BAGUA_SUCCESS) {
        std::fprintf(stderr, "%s rank %d: init failed: %s\n", name, r, bagua_get_last_error(nullptr));
        ++failures;
        return;
      }
      int rank = -1, size = -1, local_rank = -1, local_size = -1;
      bool ok = bagua_comm_rank(comm, &rank) == BAGUA_SUCCESS && bagua_comm_size(comm, &size) == BAGUA_SUCCESS &&
                bagua_comm_local_rank(comm, &local_rank) == BAGUA_SUCCESS &&
                bagua_comm_local_size(comm, &local_size) == BAGUA_SUCCESS;
      ok = ok && rank == r && size == nranks && local_rank == r && local_size == nranks;
      for (int i = 0; ok && i < 10; ++i) ok = bagua_barrier(comm, nullptr) == BAGUA_SUCCESS;
      if (!ok) {
        std::fprintf(stderr, "%s rank %d: wrong values or barrier failed: %s\n", name, r, bagua_get_last_error(comm));
        ++failures;
      }
      if (bagua_comm_destroy(comm) != BAGUA_SUCCESS) ++failures;
    });
  }
  for (auto& t : threads) t.join();
  MP_CHECK(failures.load() == 0);
}
}  // namespace

int main() {
  for (int n = 1; n <= 4; ++n) run_job(n, "sequential");
  // Two jobs at once, each from its own threads.
  std::thread a([] { run_job(3, "job-a"); });
  std::thread b([] { run_job(2, "job-b"); });
  a.join();
  b.join();
  std::printf("threads init: ok\n");
  return 0;
}

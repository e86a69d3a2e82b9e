// A rank that never arrives: the others fail init with BAGUA_ERR_TIMEOUT, naming it, within the
// timeout plus 1 s.
#include <string>
#include <thread>
#include <vector>

#include "mp/mp_check.h"

int main() {
  const int nranks = 4;
  const int missing = 2;
  const int timeout_ms = 2000;
  bagua_unique_id_t id;
  MP_OK(bagua_get_unique_id(&id));
  std::vector<std::thread> threads;
  std::vector<int> bad(nranks, 0);
  auto start = std::chrono::steady_clock::now();
  for (int r = 0; r < nranks; ++r) {
    if (r == missing) continue;
    threads.emplace_back([&, r] {
      bagua_config_t config = BAGUA_CONFIG_INITIALIZER;
      config.timeout_ms = timeout_ms;
      bagua_comm_t comm = nullptr;
      bagua_status_t status = bagua_comm_init_rank_config(&comm, nranks, id, r, &config);
      double elapsed = mp_seconds_since(start);
      std::string message = bagua_get_last_error(nullptr);
      std::printf("rank %d: %s after %.2f s: %s\n", r, bagua_status_string(status), elapsed, message.c_str());
      if (status != BAGUA_ERR_TIMEOUT || comm != nullptr) bad[r] = 1;
      if (message.find("missing rank 2") == std::string::npos) bad[r] = 1;
      if (elapsed > timeout_ms / 1000.0 + 1.0 || elapsed < timeout_ms / 1000.0 * 0.9) bad[r] = 1;
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < nranks; ++r) MP_CHECK(bad[r] == 0);
  return 0;
}

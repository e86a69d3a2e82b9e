// bagua_comm_init_from_env under the conventions of other launchers, with real processes:
// torchrun (rank 0 serves the root at MASTER_PORT+1), Open MPI with BAGUA_ROOT_FILE, and Slurm with
// BAGUA_ROOT_ADDR.
#include <sys/wait.h>
#include <unistd.h>

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "bootstrap/socket.h"
#include "mp/mp_check.h"

namespace {
using Env = std::map<std::string, std::string>;

// A port that was free a moment ago (bind port 0, read it, close).
int free_port() {
  bagua::Socket s = bagua::Socket::listen(bagua::SockAddr::resolve("127.0.0.1", 0));
  return s.local_address().port();
}

int child_main(int expected_rank, int nranks) {
  bagua_comm_t comm = nullptr;
  MP_OK(bagua_comm_init_from_env(&comm));
  int rank = -1, size = -1, local_size = -1;
  MP_OK(bagua_comm_rank(comm, &rank));
  MP_OK(bagua_comm_size(comm, &size));
  MP_OK(bagua_comm_local_size(comm, &local_size));
  MP_CHECK(rank == expected_rank);
  MP_CHECK(size == nranks);
  MP_CHECK(local_size == nranks);
  for (int i = 0; i < 5; ++i) MP_OK(bagua_barrier(comm, nullptr));
  MP_OK(bagua_comm_destroy(comm));
  return 0;
}

bool run_job(const char* name, int nranks, const std::function<Env(int)>& env_for) {
  std::vector<pid_t> pids;
  for (int r = 0; r < nranks; ++r) {
    pid_t pid = fork();
    if (pid == 0) {
      for (const char* var : {"BAGUA_RANK", "BAGUA_WORLD_SIZE", "BAGUA_ROOT_ADDR", "BAGUA_ROOT_HOSTED", "BAGUA_SECRET",
                              "RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "OMPI_COMM_WORLD_RANK",
                              "OMPI_COMM_WORLD_SIZE", "SLURM_PROCID", "SLURM_NTASKS", "BAGUA_ROOT_FILE"})
        unsetenv(var);
      for (const auto& [key, value] : env_for(r)) setenv(key.c_str(), value.c_str(), 1);
      setenv("BAGUA_TIMEOUT", "20", 1);
      _exit(child_main(r, nranks));
    }
    pids.push_back(pid);
  }
  bool ok = true;
  for (int r = 0; r < nranks; ++r) {
    int status = 0;
    waitpid(pids[r], &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      std::fprintf(stderr, "%s: rank %d failed (status %d)\n", name, r, status);
      ok = false;
    }
  }
  std::printf("%s with %d ranks: %s\n", name, nranks, ok ? "ok" : "FAILED");
  return ok;
}
}  // namespace

int main() {
  bool ok = true;
  int port = free_port();
  ok &= run_job("torchrun", 3, [&](int r) {
    return Env{{"RANK", std::to_string(r)},
               {"WORLD_SIZE", "3"},
               {"LOCAL_RANK", std::to_string(r)},
               {"MASTER_ADDR", "127.0.0.1"},
               {"MASTER_PORT", std::to_string(port - 1)}};
  });
  std::string root_file = "/tmp/bagua-root-" + std::to_string(getpid());
  ok &= run_job("openmpi + BAGUA_ROOT_FILE", 4, [&](int r) {
    return Env{{"OMPI_COMM_WORLD_RANK", std::to_string(r)},
               {"OMPI_COMM_WORLD_SIZE", "4"},
               {"BAGUA_ROOT_FILE", root_file},
               {"BAGUA_SECRET", "0123456789abcdef0123456789abcdef"}};
  });
  unlink(root_file.c_str());
  port = free_port();
  ok &= run_job("slurm + BAGUA_ROOT_ADDR", 2, [&](int r) {
    return Env{{"SLURM_PROCID", std::to_string(r)},
               {"SLURM_NTASKS", "2"},
               {"BAGUA_ROOT_ADDR", "127.0.0.1:" + std::to_string(port)},
               {"BAGUA_SECRET", "aa55"}};
  });
  return ok ? 0 : 1;
}

// Reads how this process was launched, for bagua_comm_init_from_env. Precedence (docs/architecture.md):
// BAGUA_* variables, then torchrun, then Open MPI, then Slurm. Root address: BAGUA_ROOT_ADDR, else
// MASTER_ADDR:(MASTER_PORT+1), else BAGUA_ROOT_FILE.
#pragma once

#include <functional>
#include <string>

#include "bootstrap/wire.h"

namespace bagua {

struct LaunchInfo {
  std::string launcher;  // "bagua", "torchrun", "openmpi" or "slurm": where rank and size came from
  int rank = -1;
  int nranks = 0;
  int local_rank = -1;    // as the launcher says; -1 when it does not
  std::string root_addr;  // host:port, or empty when root_file is used
  std::string root_file;
  bool root_hosted_by_launcher = false;  // BAGUA_ROOT_HOSTED=1: bagua-run serves the rendezvous
  Bytes secret;                          // empty: unauthenticated
};

using EnvLookup = std::function<const char*(const char*)>;

// Throws INVALID_USAGE naming the variable that is missing or malformed.
LaunchInfo read_launch_env(const EnvLookup& getenv_fn);

}  // namespace bagua

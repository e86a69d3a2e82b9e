#include "bootstrap/launch_env.h"

#include <cerrno>
#include <cstdlib>

#include "base/error.h"
#include "bootstrap/hmac.h"
#include "bootstrap/rendezvous.h"

namespace bagua {

namespace {

bool parse_int(const char* text, long min, long max, long* out) {
  if (text == nullptr || *text == '\0') return false;
  char* end = nullptr;
  errno = 0;
  long value = std::strtol(text, &end, 10);
  if (errno != 0 || *end != '\0' || value < min || value > max) return false;
  *out = value;
  return true;
}

struct RankSource {
  const char* launcher;
  const char* rank_var;
  const char* size_var;
  const char* local_rank_var;
};

constexpr RankSource kSources[] = {
    {"bagua", "BAGUA_RANK", "BAGUA_WORLD_SIZE", "BAGUA_LOCAL_RANK"},
    {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK"},
    {"openmpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"},
    {"slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"},
};

}  // namespace

LaunchInfo read_launch_env(const EnvLookup& env) {
  auto get = [&](const char* name) -> const char* {
    const char* value = env(name);
    return value && *value ? value : nullptr;
  };
  LaunchInfo info;
  const RankSource* source = nullptr;
  for (const RankSource& candidate : kSources) {
    if (get(candidate.rank_var)) {
      source = &candidate;
      break;
    }
  }
  if (source == nullptr)
    fail(BAGUA_ERR_INVALID_USAGE,
         "no launcher variables found: set BAGUA_RANK, BAGUA_WORLD_SIZE and BAGUA_ROOT_ADDR (or launch with bagua-run, "
         "torchrun, mpirun or srun)");
  info.launcher = source->launcher;
  long value = 0;
  if (!get(source->size_var))
    fail(BAGUA_ERR_INVALID_USAGE, "{} is set but {} is missing", source->rank_var, source->size_var);
  if (!parse_int(get(source->size_var), 1, kMaxRanks, &value))
    fail(BAGUA_ERR_INVALID_USAGE, "{}='{}' is not a rank count in [1, {}]", source->size_var, get(source->size_var),
         kMaxRanks);
  info.nranks = static_cast<int>(value);
  if (!parse_int(get(source->rank_var), 0, info.nranks - 1, &value))
    fail(BAGUA_ERR_INVALID_USAGE, "{}='{}' is not a rank in [0, {})", source->rank_var, get(source->rank_var),
         info.nranks);
  info.rank = static_cast<int>(value);
  if (const char* local = get(source->local_rank_var)) {
    if (!parse_int(local, 0, kMaxRanks, &value))
      fail(BAGUA_ERR_INVALID_USAGE, "{}='{}' is not a local rank", source->local_rank_var, local);
    info.local_rank = static_cast<int>(value);
  }

  if (const char* addr = get("BAGUA_ROOT_ADDR")) {
    info.root_addr = addr;
  } else if (const char* master = get("MASTER_ADDR")) {
    if (!get("MASTER_PORT")) fail(BAGUA_ERR_INVALID_USAGE, "MASTER_ADDR is set but MASTER_PORT is missing");
    if (!parse_int(get("MASTER_PORT"), 1, 65534, &value))
      fail(BAGUA_ERR_INVALID_USAGE, "MASTER_PORT='{}' is not a port in [1, 65534]", get("MASTER_PORT"));
    // torchrun's own store holds MASTER_PORT; the bagua root takes the next one.
    std::string host = master;
    if (host.find(':') != std::string::npos && host[0] != '[') host = "[" + host + "]";
    info.root_addr = host + ":" + std::to_string(value + 1);
  } else if (const char* file = get("BAGUA_ROOT_FILE")) {
    info.root_file = file;
  } else {
    fail(BAGUA_ERR_INVALID_USAGE,
         "no rendezvous address: set BAGUA_ROOT_ADDR (host:port), or MASTER_ADDR and MASTER_PORT, or BAGUA_ROOT_FILE "
         "(a path every rank can read)");
  }
  if (const char* hosted = get("BAGUA_ROOT_HOSTED")) info.root_hosted_by_launcher = hosted[0] == '1';
  if (const char* secret = get("BAGUA_SECRET")) {
    if (!parse_hex(secret, &info.secret) || info.secret.empty() || info.secret.size() > 64)
      fail(BAGUA_ERR_INVALID_USAGE, "BAGUA_SECRET must be 2 to 128 hex digits");
  }
  return info;
}

}  // namespace bagua

// bagua-info: what this build and machine offer, every environment variable bagua reads, and the algorithm choice
// table.
//   bagua-info                 version, build, CPU kernels, topology, environment, UCX transports
//   bagua-info --env           the environment table alone: name, who sets it, value, meaning
//   bagua-run -n N bagua-info  the same, then the host and rank layout the communicator sees
//   bagua-info --algorithms [-n N] [--hosts H]   the algorithm each collective uses, by message size, on N ranks
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <unistd.h>

#include <ucp/api/ucp.h>

#include "algorithms/registry.h"
#include "algorithms/selection.h"
#include "api/api_guard.h"
#include "base/env.h"
#include "core/config.h"
#include "kernels/cpu/reduce.h"
#include "kernels/memory_type.h"
#include "topology/host_identity.h"
#include "topology/topology.h"

namespace {

void print_environment() {
  std::printf("environment (every variable bagua reads):\n");
  for (const bagua::EnvSetting& e : bagua::env_settings()) {
    const char* value = bagua::env_get(e.name);
    std::printf("  %-27s %-9s %-16s %s\n", e.name, e.who, value ? value : "(unset)", e.meaning);
  }
}

void print_algorithms(int nranks, int nhosts) {
  bagua::Config config = bagua::Config::from_env();
  // As on a host whose ranks pass the single-copy probe (they normally do), unless BAGUA_CMA=0.
  const char* cma = bagua::env_get("BAGUA_CMA");
  bagua::AlgorithmSelector selector(config.algo, config.inter_host_gbps, cma == nullptr || std::strcmp(cma, "0") != 0);
  bagua::HostLayout hosts;
  if (nhosts > 1)  // ranks dealt host by host, as even as possible
    for (int h = 0, r = 0; h < nhosts; ++h) {
      hosts.emplace_back();
      for (int i = 0; i < nranks / nhosts + (h < nranks % nhosts ? 1 : 0); ++i) hosts.back().push_back(r++);
    }
  std::printf("algorithm choice on %d ranks, %d host(s) (bytes = total message)%s\n", nranks, std::max(nhosts, 1),
              config.algo.empty() ? "" : " with BAGUA_ALGO");
  const size_t sizes[] = {0,       1 << 10, 4 << 10,  16 << 10, 64 << 10,  256 << 10,
                          1 << 20, 4 << 20, 16 << 20, 64 << 20, 256 << 20, size_t(1) << 30};
  std::printf("%-15s", "collective");
  for (size_t s : sizes) {
    std::string label = s >= (1 << 30)   ? std::to_string(s >> 30) + "G"
                        : s >= (1 << 20) ? std::to_string(s >> 20) + "M"
                        : s >= (1 << 10) ? std::to_string(s >> 10) + "K"
                                         : std::to_string(s);
    std::printf(" %12s", label.c_str());
  }
  std::printf("\n");
  for (int c = 0; c < static_cast<int>(bagua::Collective::kCount); ++c) {
    auto coll = static_cast<bagua::Collective>(c);
    if (coll == bagua::Collective::kAlltoallv) continue;  // same choice as alltoall
    std::printf("%-15s", bagua::collective_name(coll));
    for (size_t s : sizes) std::printf(" %12s", bagua::algorithm_name(selector.choose(coll, s, nranks, hosts)));
    std::printf("\n");
  }
}

void print_overview() {
  std::printf("bagua %d.%d.%d\n", BAGUA_VERSION_MAJOR, BAGUA_VERSION_MINOR, BAGUA_VERSION_PATCH);
  unsigned major = 0, minor = 0, release = 0;
  ucp_get_version(&major, &minor, &release);
  std::printf("  UCX %u.%u.%u; CUDA support %s (%d device(s) visible)\n", major, minor, release,
              bagua::cuda_built() ? "built" : "not built", bagua::cuda_device_count());
  std::printf("  CPU reduction kernels: %s\n", bagua::cpu_kernels_name(bagua::cpu_kernels()));
  std::printf("  host identity: %s\n\n", bagua::detect_host_id().c_str());
  std::printf("topology (hwloc):\n  %s\n", bagua::MachineTopology::detect().describe().c_str());
  print_environment();
  std::printf("\nUCX transports (ucx_info -d lists details):\n");
  std::fflush(stdout);
  if (std::system("ucx_info -d 2>/dev/null | grep -E '^#\\s+Transport:' | sort -u | sed 's/^#/ /'") != 0)
    std::printf("  (ucx_info not found)\n");
}

// Under a launcher: every rank joins, rank 0 prints which ranks share a host as the communicator sees it.
int print_layout() {
  bagua_comm_t comm = nullptr;
  if (bagua_comm_init_from_env(&comm) != BAGUA_SUCCESS) {
    std::fprintf(stderr, "bagua-info: %s\n", bagua_get_last_error(nullptr));
    return 1;
  }
  int rank = 0, size = 0;
  bagua_comm_rank(comm, &rank);
  bagua_comm_size(comm, &size);
  struct Record {
    char hostname[64];
    int32_t host_index, local_rank, local_size, pid;
  } mine{};
  gethostname(mine.hostname, sizeof(mine.hostname) - 1);
  mine.host_index = comm->impl->host_of(rank);
  mine.local_rank = comm->impl->local_rank();
  mine.local_size = comm->impl->local_size();
  mine.pid = static_cast<int32_t>(getpid());
  std::vector<Record> all(size);
  bagua_status_t s = bagua_allgather(&mine, all.data(), sizeof(Record), BAGUA_UINT8, comm, nullptr);
  if (s == BAGUA_SUCCESS && rank == 0) {
    std::printf("layout: %d ranks on %d host(s)\n  rank  host  local  hostname (pid)\n", size, comm->impl->nhosts());
    for (int r = 0; r < size; ++r)
      std::printf("  %4d  %4d  %d/%d    %s (%d)\n", r, all[r].host_index, all[r].local_rank, all[r].local_size,
                  all[r].hostname, all[r].pid);
  }
  bagua_comm_destroy(comm);
  return s == BAGUA_SUCCESS ? 0 : 1;
}

bool under_launcher() {
  for (const char* v : {"BAGUA_RANK", "RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID"})
    if (bagua::env_get(v)) return true;
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  bool algorithms = false, env_only = false;
  int nranks = 0, nhosts = 1;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--algorithms") == 0)
      algorithms = true;
    else if (std::strcmp(argv[i], "--env") == 0)
      env_only = true;
    else if (std::strcmp(argv[i], "-n") == 0 && i + 1 < argc)
      nranks = std::atoi(argv[++i]);
    else if (std::strcmp(argv[i], "--hosts") == 0 && i + 1 < argc)
      nhosts = std::atoi(argv[++i]);
    else {
      std::fprintf(stderr, "usage: bagua-info [--env | --algorithms [-n nranks] [--hosts H]]\n");
      return 2;
    }
  }
  if (nranks <= 0) nranks = bagua::env_get("BAGUA_WORLD_SIZE") ? std::atoi(bagua::env_get("BAGUA_WORLD_SIZE")) : 4;
  try {
    if (env_only) {
      print_environment();
    } else if (algorithms) {
      print_algorithms(nranks, nhosts);
    } else if (under_launcher()) {
      const char* rank = bagua::env_get("BAGUA_RANK") ? bagua::env_get("BAGUA_RANK") : bagua::env_get("RANK");
      if (rank && std::strcmp(rank, "0") == 0) print_overview();
      return print_layout();
    } else {
      print_overview();
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bagua-info: %s\n", e.what());
    return 1;
  }
  return 0;
}

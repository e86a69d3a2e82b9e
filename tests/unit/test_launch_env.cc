// bagua_comm_init_from_env's reading of each launcher's variables, precedence, and its error messages.
#include <catch2/catch.hpp>

#include <map>

#include "base/error.h"
#include "bootstrap/launch_env.h"

using namespace bagua;

namespace {
LaunchInfo read(const std::map<std::string, std::string>& vars) {
  return read_launch_env([&](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  });
}

std::string error_of(const std::map<std::string, std::string>& vars) {
  try {
    read(vars);
  } catch (const Error& e) {
    CHECK(e.status() == BAGUA_ERR_INVALID_USAGE);
    return e.what();
  }
  return "";
}
}  // namespace

TEST_CASE("bagua-run variables", "[env]") {
  LaunchInfo info = read({{"BAGUA_RANK", "2"},
                          {"BAGUA_WORLD_SIZE", "4"},
                          {"BAGUA_LOCAL_RANK", "2"},
                          {"BAGUA_ROOT_ADDR", "127.0.0.1:999"},
                          {"BAGUA_SECRET", "00ff"},
                          {"BAGUA_ROOT_HOSTED", "1"}});
  CHECK(info.launcher == "bagua");
  CHECK(info.rank == 2);
  CHECK(info.nranks == 4);
  CHECK(info.local_rank == 2);
  CHECK(info.root_addr == "127.0.0.1:999");
  CHECK(info.secret == Bytes{0x00, 0xff});
  CHECK(info.root_hosted_by_launcher);
}

TEST_CASE("torchrun variables: the root is MASTER_PORT + 1", "[env]") {
  LaunchInfo info = read(
      {{"RANK", "1"}, {"WORLD_SIZE", "8"}, {"LOCAL_RANK", "1"}, {"MASTER_ADDR", "10.0.0.1"}, {"MASTER_PORT", "29500"}});
  CHECK(info.launcher == "torchrun");
  CHECK(info.rank == 1);
  CHECK(info.nranks == 8);
  CHECK(info.root_addr == "10.0.0.1:29501");
  CHECK(info.secret.empty());
  CHECK_FALSE(info.root_hosted_by_launcher);
  CHECK(read({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "::1"}, {"MASTER_PORT", "5"}}).root_addr ==
        "[::1]:6");
}

TEST_CASE("Open MPI and Slurm variables with a root file", "[env]") {
  LaunchInfo ompi = read({{"OMPI_COMM_WORLD_RANK", "3"},
                          {"OMPI_COMM_WORLD_SIZE", "4"},
                          {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                          {"BAGUA_ROOT_FILE", "/tmp/root"}});
  CHECK(ompi.launcher == "openmpi");
  CHECK(ompi.rank == 3);
  CHECK(ompi.local_rank == 1);
  CHECK(ompi.root_file == "/tmp/root");
  LaunchInfo slurm =
      read({{"SLURM_PROCID", "5"}, {"SLURM_NTASKS", "6"}, {"SLURM_LOCALID", "0"}, {"BAGUA_ROOT_ADDR", "node1:7000"}});
  CHECK(slurm.launcher == "slurm");
  CHECK(slurm.rank == 5);
  CHECK(slurm.nranks == 6);
  CHECK(slurm.root_addr == "node1:7000");
}

TEST_CASE("precedence: BAGUA_*, torchrun, Open MPI, Slurm", "[env]") {
  std::map<std::string, std::string> all = {
      {"BAGUA_RANK", "0"},          {"BAGUA_WORLD_SIZE", "1"},     {"RANK", "1"},
      {"WORLD_SIZE", "2"},          {"OMPI_COMM_WORLD_RANK", "2"}, {"OMPI_COMM_WORLD_SIZE", "3"},
      {"SLURM_PROCID", "3"},        {"SLURM_NTASKS", "4"},         {"BAGUA_ROOT_ADDR", "127.0.0.1:1"},
      {"MASTER_ADDR", "127.0.0.2"}, {"MASTER_PORT", "10"}};
  CHECK(read(all).launcher == "bagua");
  CHECK(read(all).root_addr == "127.0.0.1:1");  // BAGUA_ROOT_ADDR beats MASTER_ADDR
  all.erase("BAGUA_RANK");
  CHECK(read(all).launcher == "torchrun");
  all.erase("RANK");
  CHECK(read(all).launcher == "openmpi");
  all.erase("OMPI_COMM_WORLD_RANK");
  CHECK(read(all).launcher == "slurm");
  all.erase("BAGUA_ROOT_ADDR");
  CHECK(read(all).root_addr == "127.0.0.2:11");
}

TEST_CASE("missing or malformed variables are named", "[env]") {
  CHECK_THAT(error_of({}), Catch::Contains("BAGUA_RANK") && Catch::Contains("BAGUA_ROOT_ADDR"));
  CHECK_THAT(error_of({{"BAGUA_RANK", "0"}, {"BAGUA_ROOT_ADDR", "h:1"}}), Catch::Contains("BAGUA_WORLD_SIZE"));
  CHECK_THAT(error_of({{"RANK", "0"}, {"MASTER_ADDR", "h"}}), Catch::Contains("WORLD_SIZE"));
  CHECK_THAT(error_of({{"RANK", "0"}, {"WORLD_SIZE", "2"}}), Catch::Contains("BAGUA_ROOT_ADDR") &&
                                                                 Catch::Contains("MASTER_ADDR") &&
                                                                 Catch::Contains("BAGUA_ROOT_FILE"));
  CHECK_THAT(error_of({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}}), Catch::Contains("MASTER_PORT"));
  CHECK_THAT(error_of({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "x"}}),
             Catch::Contains("MASTER_PORT"));
  CHECK_THAT(error_of({{"BAGUA_RANK", "4"}, {"BAGUA_WORLD_SIZE", "4"}, {"BAGUA_ROOT_ADDR", "h:1"}}),
             Catch::Contains("BAGUA_RANK"));
  CHECK_THAT(error_of({{"BAGUA_RANK", "0"}, {"BAGUA_WORLD_SIZE", "zero"}, {"BAGUA_ROOT_ADDR", "h:1"}}),
             Catch::Contains("BAGUA_WORLD_SIZE"));
  CHECK_THAT(
      error_of({{"BAGUA_RANK", "0"}, {"BAGUA_WORLD_SIZE", "1"}, {"BAGUA_ROOT_ADDR", "h:1"}, {"BAGUA_SECRET", "xyz"}}),
      Catch::Contains("BAGUA_SECRET"));
}

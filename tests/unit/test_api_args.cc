// Argument validation at the C boundary: a clear status, a message, no side effects, and the next
// valid call still works.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <cstring>
#include <string>

#include "bagua/bagua.h"

namespace {
std::string last_error() { return bagua_get_last_error(nullptr); }
}  // namespace

TEST_CASE("status strings and version", "[api]") {
  CHECK(std::string(bagua_status_string(BAGUA_SUCCESS)) == "success");
  CHECK(std::string(bagua_status_string(BAGUA_ERR_TIMEOUT)) == "timed out");
  CHECK(std::string(bagua_status_string(BAGUA_ERR_REMOTE)).find("peer") != std::string::npos);
  CHECK(std::string(bagua_status_string(static_cast<bagua_status_t>(-100))) == "unknown status");
  CHECK(bagua_get_version() == BAGUA_VERSION_CODE);
  CHECK(BAGUA_VERSION_CODE == BAGUA_VERSION(BAGUA_VERSION_MAJOR, BAGUA_VERSION_MINOR, BAGUA_VERSION_PATCH));
}

TEST_CASE("NULL and out-of-range arguments", "[api]") {
  int value = 12345;
  CHECK(bagua_comm_rank(nullptr, &value) == BAGUA_ERR_INVALID_ARGUMENT);
  CHECK_THAT(last_error(), Catch::Contains("bagua_comm_rank") && Catch::Contains("comm is NULL"));
  CHECK(value == 12345);  // untouched
  CHECK(bagua_comm_size(nullptr, &value) == BAGUA_ERR_INVALID_ARGUMENT);
  CHECK(bagua_comm_local_rank(nullptr, &value) == BAGUA_ERR_INVALID_ARGUMENT);
  CHECK(bagua_comm_local_size(nullptr, &value) == BAGUA_ERR_INVALID_ARGUMENT);
  CHECK(bagua_barrier(nullptr, nullptr) == BAGUA_ERR_INVALID_ARGUMENT);
  CHECK(bagua_comm_destroy(nullptr) == BAGUA_ERR_INVALID_ARGUMENT);
  CHECK(bagua_comm_abort(nullptr) == BAGUA_ERR_INVALID_ARGUMENT);
  CHECK(bagua_get_unique_id(nullptr) == BAGUA_ERR_INVALID_ARGUMENT);
  CHECK_THAT(last_error(), Catch::Contains("id is NULL"));

  bagua_unique_id_t id{};
  bagua_comm_t comm = reinterpret_cast<bagua_comm_t>(0x1);  // must stay untouched on error
  CHECK(bagua_comm_init_rank(nullptr, 1, id, 0) == BAGUA_ERR_INVALID_ARGUMENT);
  CHECK(bagua_comm_init_rank(&comm, 0, id, 0) == BAGUA_ERR_INVALID_ARGUMENT);
  CHECK_THAT(last_error(), Catch::Contains("nranks 0"));
  CHECK(bagua_comm_init_rank(&comm, 4, id, 4) == BAGUA_ERR_INVALID_ARGUMENT);
  CHECK_THAT(last_error(), Catch::Contains("rank 4"));
  CHECK(bagua_comm_init_rank(&comm, 2, id, -1) == BAGUA_ERR_INVALID_ARGUMENT);
  CHECK(bagua_comm_init_rank(&comm, 1, id, 0) == BAGUA_ERR_INVALID_ARGUMENT);  // all-zero id
  CHECK_THAT(last_error(), Catch::Contains("unique id"));
  CHECK(comm == reinterpret_cast<bagua_comm_t>(0x1));

  bagua_config_t config = BAGUA_CONFIG_INITIALIZER;
  config.magic = 0;
  REQUIRE(bagua_get_unique_id(&id) == BAGUA_SUCCESS);
  CHECK(bagua_comm_init_rank_config(&comm, 1, id, 0, &config) == BAGUA_ERR_INVALID_ARGUMENT);
  CHECK_THAT(last_error(), Catch::Contains("magic"));
  CHECK(comm == reinterpret_cast<bagua_comm_t>(0x1));

  // After all that, a valid single-rank communicator forms and works.
  config.magic = BAGUA_CONFIG_MAGIC;
  config.timeout_ms = 5000;
  REQUIRE(bagua_comm_init_rank_config(&comm, 1, id, 0, &config) == BAGUA_SUCCESS);
  CHECK(bagua_comm_rank(comm, nullptr) == BAGUA_ERR_INVALID_ARGUMENT);
  CHECK_THAT(std::string(bagua_get_last_error(comm)), Catch::Contains("rank is NULL"));
  CHECK(bagua_comm_rank(comm, &value) == BAGUA_SUCCESS);
  CHECK(value == 0);
  CHECK(bagua_comm_size(comm, &value) == BAGUA_SUCCESS);
  CHECK(value == 1);
  CHECK(bagua_barrier(comm, nullptr) == BAGUA_SUCCESS);
  CHECK(bagua_comm_destroy(comm) == BAGUA_SUCCESS);
}

TEST_CASE("init_from_env without launcher variables names what to set", "[api]") {
  for (const char* name : {"BAGUA_RANK", "RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID"}) unsetenv(name);
  bagua_comm_t comm = nullptr;
  CHECK(bagua_comm_init_from_env(&comm) == BAGUA_ERR_INVALID_USAGE);
  CHECK_THAT(last_error(), Catch::Contains("BAGUA_RANK") && Catch::Contains("BAGUA_ROOT_ADDR"));
  CHECK(comm == nullptr);
}

TEST_CASE("abort poisons a communicator; destroy still works", "[api]") {
  bagua_unique_id_t id;
  REQUIRE(bagua_get_unique_id(&id) == BAGUA_SUCCESS);
  bagua_comm_t comm = nullptr;
  REQUIRE(bagua_comm_init_rank(&comm, 1, id, 0) == BAGUA_SUCCESS);
  CHECK(bagua_comm_abort(comm) == BAGUA_SUCCESS);
  CHECK(bagua_barrier(comm, nullptr) == BAGUA_ERR_ABORTED);
  CHECK_THAT(std::string(bagua_get_last_error(comm)), Catch::Contains("abort"));
  CHECK(bagua_barrier(comm, nullptr) == BAGUA_ERR_ABORTED);
  int rank = -1;
  CHECK(bagua_comm_rank(comm, &rank) == BAGUA_SUCCESS);  // queries still answer
  CHECK(bagua_comm_destroy(comm) == BAGUA_SUCCESS);
}

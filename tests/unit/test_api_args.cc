// Argument validation at the C boundary: a clear status, a message, no side effects, and the next
// valid call still works.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <cstring>
#include <string>

#include "bagua/bagua.h"

namespace {
std::string last_error() { return bagua_get_last_error(nullptr); }

bagua_comm_t one_rank_comm() {
  bagua_unique_id_t id{};
  REQUIRE(bagua_get_unique_id(&id) == BAGUA_SUCCESS);
  bagua_comm_t comm = nullptr;
  REQUIRE(bagua_comm_init_rank(&comm, 1, id, 0) == BAGUA_SUCCESS);
  return comm;
}

// A scheduler with the default settings and one float32 tensor, registered.
bagua_scheduler_t scheduler_of_one_tensor(bagua_comm_t comm, float* tensor, size_t count) {
  bagua_scheduler_config_t cfg = BAGUA_SCHEDULER_CONFIG_INITIALIZER;
  bagua_scheduler_t sched = nullptr;
  REQUIRE(bagua_scheduler_create(comm, &cfg, &sched) == BAGUA_SUCCESS);
  void* tensors[1] = {tensor};
  const size_t counts[1] = {count};
  const bagua_datatype_t dtypes[1] = {BAGUA_FLOAT32};
  REQUIRE(bagua_scheduler_register(sched, 1, tensors, counts, dtypes) == BAGUA_SUCCESS);
  return sched;
}
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

TEST_CASE("abort poisons a communicator and destroy still works", "[api]") {
  bagua_comm_t comm = one_rank_comm();
  CHECK(bagua_comm_abort(comm) == BAGUA_SUCCESS);
  CHECK(bagua_barrier(comm, nullptr) == BAGUA_ERR_ABORTED);
  CHECK_THAT(std::string(bagua_get_last_error(comm)), Catch::Contains("abort"));
  CHECK(bagua_barrier(comm, nullptr) == BAGUA_ERR_ABORTED);
  int rank = -1;
  CHECK(bagua_comm_rank(comm, &rank) == BAGUA_SUCCESS);  // queries still answer
  CHECK(bagua_comm_destroy(comm) == BAGUA_SUCCESS);
}

// Every row of the dispatcher's argument table (src/algorithms/dispatch.cc) on a one-rank communicator: the
// in-place form runs, an overlap that is not in place, a NULL buffer, an overflowing count, a bad op or root is
// refused with INVALID_ARGUMENT, and a refused call leaves the output untouched.
TEST_CASE("collective argument rules: in place, overlap, NULL, overflow, op and root", "[api]") {
  bagua_comm_t comm = one_rank_comm();
  float buf[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  float out[8] = {0};
  const size_t huge = SIZE_MAX / 2;
  using Call = bagua_status_t (*)(bagua_comm_t, const void*, void*, size_t);
  struct Row {
    const char* name;
    Call call;
  };
  const Row rows[] = {
      {"allreduce", [](bagua_comm_t c, const void* s, void* r,
                       size_t n) { return bagua_allreduce(s, r, n, BAGUA_FLOAT32, BAGUA_SUM, c, nullptr); }},
      {"reduce_scatter", [](bagua_comm_t c, const void* s, void* r,
                            size_t n) { return bagua_reduce_scatter(s, r, n, BAGUA_FLOAT32, BAGUA_SUM, c, nullptr); }},
      {"allgather", [](bagua_comm_t c, const void* s, void* r,
                       size_t n) { return bagua_allgather(s, r, n, BAGUA_FLOAT32, c, nullptr); }},
      {"broadcast", [](bagua_comm_t c, const void* s, void* r,
                       size_t n) { return bagua_broadcast(s, r, n, BAGUA_FLOAT32, 0, c, nullptr); }},
      {"reduce", [](bagua_comm_t c, const void* s, void* r,
                    size_t n) { return bagua_reduce(s, r, n, BAGUA_FLOAT32, BAGUA_SUM, 0, c, nullptr); }},
      {"gather", [](bagua_comm_t c, const void* s, void* r,
                    size_t n) { return bagua_gather(s, r, n, BAGUA_FLOAT32, 0, c, nullptr); }},
      {"scatter", [](bagua_comm_t c, const void* s, void* r,
                     size_t n) { return bagua_scatter(s, r, n, BAGUA_FLOAT32, 0, c, nullptr); }},
  };
  for (const Row& row : rows) {
    INFO(row.name);
    CHECK(row.call(comm, buf, buf, 4) == BAGUA_SUCCESS);  // in place (one rank: every in-place offset is 0)
    CHECK(buf[0] == 1);
    CHECK(row.call(comm, buf, buf + 1, 4) == BAGUA_ERR_INVALID_ARGUMENT);
    CHECK_THAT(last_error(), Catch::Contains("in place"));
    CHECK(row.call(comm, nullptr, out, 4) == BAGUA_ERR_INVALID_ARGUMENT);
    CHECK_THAT(last_error(), Catch::Contains("sendbuf is NULL"));
    CHECK(row.call(comm, buf, nullptr, 4) == BAGUA_ERR_INVALID_ARGUMENT);
    CHECK_THAT(last_error(), Catch::Contains("recvbuf is NULL"));
    CHECK(row.call(comm, buf, out, huge) == BAGUA_ERR_INVALID_ARGUMENT);
    CHECK_THAT(last_error(), Catch::Contains("overflows"));
    CHECK(out[0] == 0);  // nothing refused wrote anything
    CHECK(row.call(comm, buf, out, 4) == BAGUA_SUCCESS);
    CHECK(out[3] == 4);
    std::memset(out, 0, sizeof(out));
  }
  CHECK(bagua_alltoall(buf, buf, 4, BAGUA_FLOAT32, comm, nullptr) == BAGUA_ERR_INVALID_ARGUMENT);
  CHECK_THAT(last_error(), Catch::Contains("alltoall has no in-place form"));
  const size_t counts[1] = {4}, displs[1] = {0}, more[1] = {5};
  CHECK(bagua_alltoallv(buf, counts, displs, buf + 2, counts, displs, BAGUA_FLOAT32, comm, nullptr) ==
        BAGUA_ERR_INVALID_ARGUMENT);
  CHECK(bagua_alltoallv(buf, counts, displs, out, more, displs, BAGUA_FLOAT32, comm, nullptr) ==
        BAGUA_ERR_INVALID_ARGUMENT);
  CHECK_THAT(last_error(), Catch::Contains("recvcounts[0]"));
  CHECK(bagua_alltoallv(buf, counts, displs, out, counts, displs, BAGUA_FLOAT32, comm, nullptr) == BAGUA_SUCCESS);
  CHECK(out[3] == 4);
  CHECK(bagua_allreduce(buf, out, 4, BAGUA_FLOAT32, static_cast<bagua_redop_t>(99), comm, nullptr) ==
        BAGUA_ERR_INVALID_ARGUMENT);
  CHECK_THAT(last_error(), Catch::Contains("op 99"));
  CHECK(bagua_reduce(buf, out, 4, BAGUA_FLOAT32, BAGUA_SUM, 1, comm, nullptr) == BAGUA_ERR_INVALID_ARGUMENT);
  CHECK_THAT(last_error(), Catch::Contains("root 1"));
  CHECK(bagua_allreduce(buf, out, 4, static_cast<bagua_datatype_t>(42), BAGUA_SUM, comm, nullptr) ==
        BAGUA_ERR_INVALID_ARGUMENT);
  CHECK(bagua_comm_destroy(comm) == BAGUA_SUCCESS);
}

// A host request still out when its communicator is destroyed stays valid: bagua_wait or bagua_test ends it with its
// operation's outcome, or ABORTED where it had not completed (a receive that nothing sends to). A refused shrink
// leaves its out-parameter alone. (Under AddressSanitizer this also shows that nothing reads the freed
// communicator.)
TEST_CASE("requests outlive their destroyed communicator, and a refused shrink keeps newcomm", "[api]") {
  bagua_comm_t comm = one_rank_comm();
  int32_t in[4] = {1, 2, 3, 4}, out[4] = {0, 0, 0, 0}, never[2] = {-1, -1};
  bagua_request_t summed = nullptr, waited = nullptr, tested = nullptr;
  REQUIRE(bagua_iallreduce(in, out, 4, BAGUA_INT32, BAGUA_SUM, comm, &summed) == BAGUA_SUCCESS);
  REQUIRE(bagua_irecv(&never[0], 1, BAGUA_INT32, 0, comm, &waited) == BAGUA_SUCCESS);
  REQUIRE(bagua_irecv(&never[1], 1, BAGUA_INT32, 0, comm, &tested) == BAGUA_SUCCESS);
  bagua_comm_t kept = comm;
  CHECK(bagua_comm_shrink(comm, &kept) == BAGUA_ERR_INVALID_USAGE);  // operations in flight
  CHECK(kept == comm);
  CHECK(bagua_comm_destroy(comm) == BAGUA_SUCCESS);
  CHECK(bagua_wait(summed) == BAGUA_SUCCESS);  // one rank: done when posted
  CHECK(out[3] == 4);
  CHECK(bagua_wait(waited) == BAGUA_ERR_ABORTED);
  CHECK_THAT(last_error(), Catch::Contains("bagua_comm_destroy came before it completed"));
  int done = 0;
  CHECK(bagua_test(tested, &done) == BAGUA_ERR_ABORTED);
  CHECK(done == 1);
  CHECK(never[0] == -1);
  CHECK(never[1] == -1);
}

// The scheduler runs on its own split: it keeps working after the communicator it was made from is destroyed, and
// its calls record errors as the thread's. Settings it cannot honour are refused at create (DECENTRALIZED on
// BAGUA_TOPO_SHIFT_ONE with an odd number of ranks); ONEBIT ignores the compression settings it does not use.
TEST_CASE("a scheduler outlives its parent communicator, and its settings are checked at create", "[api]") {
  bagua_comm_t comm = one_rank_comm();
  bagua_scheduler_config_t cfg = BAGUA_SCHEDULER_CONFIG_INITIALIZER;
  bagua_scheduler_t sched = nullptr;
  cfg.algorithm = BAGUA_BUCKET_DECENTRALIZED;
  cfg.topology = BAGUA_TOPO_SHIFT_ONE;
  CHECK(bagua_scheduler_create(comm, &cfg, &sched) == BAGUA_ERR_INVALID_ARGUMENT);
  CHECK_THAT(last_error(), Catch::Contains("even number of ranks"));
  CHECK(sched == nullptr);
  cfg = BAGUA_SCHEDULER_CONFIG_INITIALIZER;
  cfg.algorithm = BAGUA_BUCKET_ONEBIT;
  bagua_compression_t stochastic = BAGUA_COMPRESSION_INITIALIZER;
  stochastic.stochastic = 1;
  cfg.compression = &stochastic;
  REQUIRE(bagua_scheduler_create(comm, &cfg, &sched) == BAGUA_SUCCESS);
  CHECK(bagua_scheduler_destroy(sched) == BAGUA_SUCCESS);

  float grad[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  sched = scheduler_of_one_tensor(comm, grad, 8);
  CHECK(bagua_comm_destroy(comm) == BAGUA_SUCCESS);
  CHECK(bagua_scheduler_mark_ready(sched, 0, nullptr) == BAGUA_SUCCESS);
  CHECK(bagua_scheduler_wait(sched, nullptr) == BAGUA_SUCCESS);
  CHECK(grad[7] == 8.0f);  // the average over one rank
  CHECK(bagua_scheduler_mark_ready(sched, 3, nullptr) == BAGUA_ERR_INVALID_USAGE);
  CHECK_THAT(last_error(), Catch::Contains("tensor 3 is not registered"));
  bagua_scheduler_info_t info;
  info.size = sizeof info;
  CHECK(bagua_scheduler_get_info(sched, &info) == BAGUA_SUCCESS);
  CHECK(info.steps == 1);
  CHECK(bagua_scheduler_destroy(sched) == BAGUA_SUCCESS);
}

// Error feedback is kept in float32 whatever the dtype: a count that fits as fp16 but not as float32 is refused as
// an argument, not reported as an internal error.
TEST_CASE("a quantized state too large for its float32 error feedback is an invalid argument", "[api]") {
  bagua_comm_t comm = one_rank_comm();
  bagua_compression_t cfg = BAGUA_COMPRESSION_INITIALIZER;
  cfg.error_feedback = 1;
  bagua_qstate_t state = nullptr;
  const size_t count = (size_t{1} << 61) + 1;  // 2^62 + 2 bytes of fp16, 2^63 + 4 of float32
  CHECK(bagua_qstate_create(comm, count, BAGUA_FLOAT16, &cfg, &state) == BAGUA_ERR_INVALID_ARGUMENT);
  CHECK_THAT(last_error(), Catch::Contains("error feedback"));
  CHECK(state == nullptr);
  CHECK(bagua_comm_destroy(comm) == BAGUA_SUCCESS);
}

// bagua_comm_abort reaches what the library runs on its own splits of the communicator: a scheduler's next step and
// the averaging thread fail with ABORTED (without the link both would go on, on a healthy split).
TEST_CASE("abort reaches the schedulers and averagers made from a communicator", "[api]") {
  bagua_comm_t comm = one_rank_comm();
  float grad[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  bagua_scheduler_t sched = scheduler_of_one_tensor(comm, grad, 8);
  double weights[4] = {1, 2, 3, 4};
  bagua_async_average_t averager = nullptr;
  REQUIRE(bagua_async_average_start(comm, weights, 4, BAGUA_FLOAT64, 5, &averager) == BAGUA_SUCCESS);
  CHECK(bagua_comm_abort(comm) == BAGUA_SUCCESS);
  CHECK(bagua_scheduler_mark_ready(sched, 0, nullptr) == BAGUA_SUCCESS);
  CHECK(bagua_scheduler_wait(sched, nullptr) == BAGUA_ERR_ABORTED);
  CHECK_THAT(last_error(), Catch::Contains("abort"));
  CHECK(bagua_async_average_stop(averager) == BAGUA_ERR_ABORTED);  // its last round ran on the aborted split
  CHECK(bagua_scheduler_destroy(sched) == BAGUA_SUCCESS);
  CHECK(bagua_comm_destroy(comm) == BAGUA_SUCCESS);
}

// The less common calls' arguments: NULL handles and pointers, bad compression settings, an overflowing count, a
// count or `which` that does not match, a bad flag, a short stats struct. Each is refused with INVALID_ARGUMENT and
// changes nothing: the lpdec made afterwards steps, and its replica is the input (one rank).
TEST_CASE("lpdec, request, topology and stats arguments", "[api]") {
  bagua_comm_t comm = one_rank_comm();
  float x[4] = {1, 2, 3, 4}, out[5] = {0, 0, 0, 0, 0};
  bagua_compression_t cfg = BAGUA_COMPRESSION_INITIALIZER, three_bits = BAGUA_COMPRESSION_INITIALIZER;
  three_bits.bits = 3;
  bagua_lpdec_t lp = nullptr;
  CHECK(bagua_lpdec_create(comm, 4, &cfg, x, nullptr) == BAGUA_ERR_INVALID_ARGUMENT);
  CHECK(bagua_lpdec_create(nullptr, 4, &cfg, x, &lp) == BAGUA_ERR_INVALID_ARGUMENT);
  CHECK(bagua_lpdec_create(comm, 4, &three_bits, x, &lp) == BAGUA_ERR_INVALID_ARGUMENT);
  CHECK_THAT(last_error(), Catch::Contains("bits"));
  CHECK(bagua_lpdec_create(comm, 4, &cfg, nullptr, &lp) == BAGUA_ERR_INVALID_ARGUMENT);
  CHECK(bagua_lpdec_create(comm, SIZE_MAX / 2, &cfg, x, &lp) == BAGUA_ERR_INVALID_ARGUMENT);
  CHECK_THAT(last_error(), Catch::Contains("overflows"));
  CHECK(lp == nullptr);
  REQUIRE(bagua_lpdec_create(comm, 4, &cfg, x, &lp) == BAGUA_SUCCESS);
  CHECK(bagua_lpdec_step(nullptr, x) == BAGUA_ERR_INVALID_ARGUMENT);
  CHECK(bagua_lpdec_step(lp, nullptr) == BAGUA_ERR_INVALID_ARGUMENT);
  CHECK(bagua_lpdec_replica(lp, 2, out, 4) == BAGUA_ERR_INVALID_ARGUMENT);
  CHECK(bagua_lpdec_replica(lp, 0, out, 5) == BAGUA_ERR_INVALID_ARGUMENT);
  CHECK(bagua_lpdec_replica(lp, 0, nullptr, 4) == BAGUA_ERR_INVALID_ARGUMENT);
  CHECK(out[0] == 0);
  CHECK(bagua_lpdec_step(lp, x) == BAGUA_SUCCESS);
  CHECK(bagua_lpdec_replica(lp, 0, out, 4) == BAGUA_SUCCESS);
  CHECK(out[3] == x[3]);
  CHECK(bagua_lpdec_destroy(lp) == BAGUA_SUCCESS);
  CHECK(bagua_lpdec_destroy(nullptr) == BAGUA_ERR_INVALID_ARGUMENT);

  int done = -1;
  CHECK(bagua_wait(nullptr) == BAGUA_ERR_INVALID_ARGUMENT);
  CHECK(bagua_test(nullptr, &done) == BAGUA_ERR_INVALID_ARGUMENT);
  CHECK(done == -1);

  bagua_topology_t topo = nullptr;
  REQUIRE(bagua_topology_create(comm, BAGUA_TOPO_RING, &topo) == BAGUA_SUCCESS);
  CHECK(bagua_topology_set_hierarchical(topo, 2) == BAGUA_ERR_INVALID_ARGUMENT);
  CHECK(bagua_topology_set_hierarchical(nullptr, 1) == BAGUA_ERR_INVALID_ARGUMENT);
  CHECK(bagua_topology_destroy(topo) == BAGUA_SUCCESS);

  bagua_stats_t stats{};
  stats.size = 3;
  CHECK(bagua_comm_get_stats(comm, &stats) == BAGUA_ERR_INVALID_ARGUMENT);
  CHECK(bagua_comm_get_stats(comm, nullptr) == BAGUA_ERR_INVALID_ARGUMENT);
  CHECK(bagua_comm_dump_trace(nullptr, nullptr) == BAGUA_ERR_INVALID_ARGUMENT);
  CHECK(bagua_comm_destroy(comm) == BAGUA_SUCCESS);
}

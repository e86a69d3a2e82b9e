// Under bagua-run -n 3 with BAGUA_TRACE_DIR set (tests/mp/trace_check.sh runs it and then bagua-trace):
//   on demand   every rank writes its flight recorder with bagua_comm_dump_trace to a path of its own, which
//               must list the completed operations with their algorithm, oldest first;
//   skip        two allreduces and a ring of sends and receives, then the last rank calls a barrier where the
//               others call a third allreduce: every rank must fail (TIMEOUT, or REMOTE relayed) within the
//               timeout plus a margin, and each writes its flight recorder into BAGUA_TRACE_DIR by itself;
//   behind      the same, but the last rank calls nothing: the others fail and write theirs, and it writes its
//               own with bagua_comm_dump_trace once they have.
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "mp/mp_check.h"

int main(int argc, char** argv) {
  std::string mode = argc > 1 ? argv[1] : "skip";
  bagua_comm_t comm;
  MP_OK(bagua_comm_init_from_env(&comm));
  int rank, n;
  MP_OK(bagua_comm_rank(comm, &rank));
  MP_OK(bagua_comm_size(comm, &n));
  std::vector<float> x(1000, 1.0f);
  for (int i = 0; i < 2; ++i)
    MP_OK(bagua_allreduce(x.data(), x.data(), x.size(), BAGUA_FLOAT32, BAGUA_SUM, comm, nullptr));
  // A ring of sends and receives: point-to-point sequence numbers, which bagua-trace must not take for
  // collectives.
  std::vector<int> token(4, rank), got(4);
  MP_OK(bagua_group_start());
  MP_OK(bagua_send(token.data(), token.size(), BAGUA_INT32, (rank + 1) % n, comm, nullptr));
  MP_OK(bagua_recv(got.data(), got.size(), BAGUA_INT32, (rank + n - 1) % n, comm, nullptr));
  MP_OK(bagua_group_end());
  MP_CHECK(got[0] == (rank + n - 1) % n);
  if (mode == "ondemand") {
    // The relaxations are counted by algorithm too: a quantized allreduce below the full-precision size and a
    // gossip step on a ring.
    bagua_compression_t cfg = BAGUA_COMPRESSION_INITIALIZER;
    MP_OK(bagua_quantized_allreduce(x.data(), x.data(), x.size(), BAGUA_FLOAT32, BAGUA_SUM, &cfg, nullptr, comm,
                                    nullptr));
    bagua_topology_t ring;
    MP_OK(bagua_topology_create(comm, BAGUA_TOPO_RING, &ring));
    MP_OK(bagua_neighbor_allreduce(x.data(), x.data(), x.size(), BAGUA_FLOAT32, ring, 0, comm, nullptr));
    MP_OK(bagua_topology_destroy(ring));
    const char* dir = std::getenv("BAGUA_TRACE_DIR");
    MP_CHECK(dir != nullptr);
    std::string path = std::string(dir) + "/on-demand-rank" + std::to_string(rank) + ".txt";
    MP_OK(bagua_comm_dump_trace(comm, path.c_str()));
    std::ifstream in(path);
    std::stringstream text;
    text << in.rdbuf();
    std::string s = text.str();
    MP_CHECK(s.rfind("# bagua flight recorder: comm ", 0) == 0);
    MP_CHECK(s.find("rank " + std::to_string(rank) + " of " + std::to_string(n)) != std::string::npos);
    MP_CHECK(s.find("# completed by algorithm: allreduce ") != std::string::npos);
    MP_CHECK(s.find("neighbor_allreduce ring 1") != std::string::npos);
    MP_CHECK(s.find("quantized_allreduce full precision 1") != std::string::npos);
    MP_CHECK(s.find(" D 0 ") != std::string::npos && s.find("allreduce #0 (1000 x float32") < s.find("allreduce #1"));
    // The alltoalls that calibrate selection when the communicator is made are not the caller's.
    MP_CHECK(s.find("calibration") == std::string::npos && s.find("alltoall") == std::string::npos);
    MP_CHECK(bagua_comm_dump_trace(comm, "/nonexistent-dir/trace.txt") == BAGUA_ERR_SYSTEM);
    MP_CHECK(std::string(bagua_get_last_error(comm)).find("/nonexistent-dir/trace.txt") != std::string::npos);
    MP_OK(bagua_comm_destroy(comm));
    return 0;
  }
  if (mode == "skip") {  // an early file of this communicator next to the one its failure writes
    std::string early = std::string(std::getenv("BAGUA_TRACE_DIR")) + "/early-rank" + std::to_string(rank) + ".txt";
    MP_OK(bagua_comm_dump_trace(comm, early.c_str()));
  }
  if (mode == "behind" && rank == n - 1) {
    // This rank never reaches the third allreduce: after the others have timed out, it writes its recorder.
    std::this_thread::sleep_for(std::chrono::milliseconds(1000 * mp_env_int("BAGUA_TIMEOUT") + 1500));
    MP_OK(bagua_comm_dump_trace(comm, nullptr));
    bagua_comm_destroy(comm);
    return 0;
  }
  auto start = std::chrono::steady_clock::now();
  bagua_status_t status = rank == n - 1 && mode == "skip"
                              ? bagua_barrier(comm, nullptr)
                              : bagua_allreduce(x.data(), x.data(), x.size(), BAGUA_FLOAT32, BAGUA_SUM, comm, nullptr);
  double took = mp_seconds_since(start);
  std::printf("rank %d: %s after %.2f s: %s\n", rank, bagua_status_string(status), took, bagua_get_last_error(comm));
  // skip: the barrier's messages arrive under the allreduce's sequence number, and the call fingerprint names the
  // mismatch at once (INVALID_USAGE); behind: nothing arrives, so the others time out.
  MP_CHECK(mode == "skip" ? status == BAGUA_ERR_INVALID_USAGE
                          : (status == BAGUA_ERR_TIMEOUT || status == BAGUA_ERR_REMOTE));
  MP_CHECK(took < mp_env_int("BAGUA_TIMEOUT") + 2.0);
  bagua_comm_destroy(comm);
  return 0;
}

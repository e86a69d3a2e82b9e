// bagua_broadcast_perf: nccl-tests' broadcast_perf. busbw = algbw.
#include "common/collective_oracle.h"
#include "perf/perf_driver.h"

using namespace bagua::perf;
using namespace bagua::testing;

int main(int argc, char** argv) {
  PerfOp op;
  op.name = "broadcast";
  op.busbw = [](int) { return 1.0; };
  op.send_elems = op.recv_elems = [](size_t count, int) { return count; };
  op.fill = [](void* send, size_t count, const PerfArgs& a, int rank, int) {
    if (rank == a.root) fill_codes(send, count, a.dtype, a.root, 1);
  };
  op.check = [](const void* recv, size_t count, const PerfArgs& a, int, int) {
    return wrong_codes(recv, count, a.dtype, a.root, 1);
  };
  op.run = [](const void* s, void* r, size_t count, const PerfArgs& a, bagua_comm_t comm) {
    return bagua_broadcast(s, r, count, a.dtype, a.root, comm, a.stream);
  };
  op.in_place = PerfOp::InPlace::kSame;
  op.uses_root = true;
  return run_perf(argc, argv, op);
}

// bagua_reduce_perf: nccl-tests' reduce_perf. busbw = algbw.
#include "common/collective_oracle.h"
#include "perf/perf_driver.h"

using namespace bagua::perf;
using namespace bagua::testing;

int main(int argc, char** argv) {
  PerfOp op;
  op.name = "reduce";
  op.busbw = [](int) { return 1.0; };
  op.send_elems = op.recv_elems = [](size_t count, int) { return count; };
  op.fill = [](void* send, size_t count, const PerfArgs& a, int rank, int) {
    fill_input(send, count, a.dtype, a.op, rank);
  };
  op.check = [](const void* recv, size_t count, const PerfArgs& a, int rank, int n) -> size_t {
    return rank == a.root ? wrong_reduced(recv, count, 0, a.dtype, a.op, n) : 0;
  };
  op.run = [](const void* s, void* r, size_t count, const PerfArgs& a, bagua_comm_t comm) {
    return bagua_reduce(s, r, count, a.dtype, a.op, a.root, comm, a.stream);
  };
  op.in_place = PerfOp::InPlace::kSame;
  op.uses_op = true;
  op.uses_root = true;
  return run_perf(argc, argv, op);
}

// bagua_allreduce_perf: nccl-tests' all_reduce_perf. busbw = algbw * 2(n-1)/n.
#include "common/collective_oracle.h"
#include "perf/perf_driver.h"

using namespace bagua::perf;
using namespace bagua::testing;

int main(int argc, char** argv) {
  PerfOp op;
  op.name = "allreduce";
  op.busbw = [](int n) { return 2.0 * (n - 1) / n; };
  op.send_elems = op.recv_elems = [](size_t count, int) { return count; };
  op.fill = [](void* send, size_t count, const PerfArgs& a, int rank, int) {
    fill_input(send, count, a.dtype, a.op, rank);
  };
  op.check = [](const void* recv, size_t count, const PerfArgs& a, int, int n) {
    return wrong_reduced(recv, count, 0, a.dtype, a.op, n);
  };
  op.run = [](const void* s, void* r, size_t count, const PerfArgs& a, bagua_comm_t comm) {
    return bagua_allreduce(s, r, count, a.dtype, a.op, comm, a.stream);
  };
  op.in_place = PerfOp::InPlace::kSame;
  op.uses_op = true;
  return run_perf(argc, argv, op);
}

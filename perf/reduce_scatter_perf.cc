// bagua_reduce_scatter_perf: nccl-tests' reduce_scatter_perf (size = the whole send buffer). busbw = algbw * (n-1)/n.
#include "common/collective_oracle.h"
#include "perf/perf_driver.h"

using namespace bagua::perf;
using namespace bagua::testing;

int main(int argc, char** argv) {
  PerfOp op;
  op.name = "reduce_scatter";
  op.busbw = [](int n) { return static_cast<double>(n - 1) / n; };
  op.send_elems = [](size_t count, int n) { return count / n * n; };
  op.recv_elems = [](size_t count, int n) { return count / n; };
  op.fill = [](void* send, size_t count, const PerfArgs& a, int rank, int n) {
    fill_input_at(send, count / n * n, 0, a.dtype, a.op, rank);
  };
  op.check = [](const void* recv, size_t count, const PerfArgs& a, int rank, int n) {
    return wrong_reduced(recv, count / n, rank * (count / n), a.dtype, a.op, n);
  };
  op.run = [](const void* s, void* r, size_t count, const PerfArgs& a, bagua_comm_t comm) {
    int n = 1;
    bagua_comm_size(comm, &n);
    return bagua_reduce_scatter(s, r, count / n, a.dtype, a.op, comm, a.stream);
  };
  op.in_place = PerfOp::InPlace::kRecvInsideSend;
  op.uses_op = true;
  return run_perf(argc, argv, op);
}

// bagua_allreduce_perf: nccl-tests' all_reduce_perf for bagua. busbw = algbw * 2(n-1)/n.
#include "perf/perf_driver.h"

int main(int argc, char** argv) {
  bagua::perf::PerfOp op;
  op.name = "allreduce";
  op.busbw_factor = [](int n) { return 2.0 * (n - 1) / n; };
  op.run = [](const void* sendbuf, void* recvbuf, size_t count, const bagua::perf::PerfArgs& args, bagua_comm_t comm) {
    return bagua_allreduce(sendbuf, recvbuf, count, args.dtype, args.op, comm, nullptr);
  };
  return bagua::perf::run_perf(argc, argv, op);
}

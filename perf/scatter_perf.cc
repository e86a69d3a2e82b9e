// bagua_scatter_perf: nccl-tests' scatter_perf (size = the root's whole send buffer). busbw = algbw * (n-1)/n.
#include "common/collective_oracle.h"
#include "perf/perf_driver.h"

using namespace bagua::perf;
using namespace bagua::testing;

int main(int argc, char** argv) {
  PerfOp op;
  op.name = "scatter";
  op.busbw = [](int n) { return static_cast<double>(n - 1) / n; };
  op.send_elems = [](size_t count, int n) { return count / n * n; };
  op.recv_elems = [](size_t count, int n) { return count / n; };
  op.fill = [](void* send, size_t count, const PerfArgs& a, int rank, int n) {
    if (rank != a.root) return;
    size_t block = count / n;
    for (int b = 0; b < n; ++b)
      fill_codes(static_cast<char*>(send) + b * block * bagua::datatype_size(a.dtype), block, a.dtype, a.root, b);
  };
  op.check = [](const void* recv, size_t count, const PerfArgs& a, int rank, int n) {
    return wrong_codes(recv, count / n, a.dtype, a.root, rank);
  };
  op.run = [](const void* s, void* r, size_t count, const PerfArgs& a, bagua_comm_t comm) {
    int n = 1;
    bagua_comm_size(comm, &n);
    return bagua_scatter(s, r, count / n, a.dtype, a.root, comm, a.stream);
  };
  op.in_place = PerfOp::InPlace::kRecvInsideSend;
  op.uses_root = true;
  return run_perf(argc, argv, op);
}

// bagua_allgather_perf: nccl-tests' all_gather_perf (size = the whole receive buffer). busbw = algbw * (n-1)/n.
#include "common/collective_oracle.h"
#include "perf/perf_driver.h"

using namespace bagua::perf;
using namespace bagua::testing;

int main(int argc, char** argv) {
  PerfOp op;
  op.name = "allgather";
  op.busbw = [](int n) { return static_cast<double>(n - 1) / n; };
  op.send_elems = [](size_t count, int n) { return count / n; };
  op.recv_elems = [](size_t count, int n) { return count / n * n; };
  op.fill = [](void* send, size_t count, const PerfArgs& a, int rank, int n) {
    fill_codes(send, count / n, a.dtype, rank, 0);
  };
  op.check = [](const void* recv, size_t count, const PerfArgs& a, int, int n) {
    size_t block = count / n, wrong = 0;
    for (int b = 0; b < n; ++b)
      wrong +=
          wrong_codes(static_cast<const char*>(recv) + b * block * bagua::datatype_size(a.dtype), block, a.dtype, b, 0);
    return wrong;
  };
  op.run = [](const void* s, void* r, size_t count, const PerfArgs& a, bagua_comm_t comm) {
    int n = 1;
    bagua_comm_size(comm, &n);
    return bagua_allgather(s, r, count / n, a.dtype, comm, a.stream);
  };
  op.in_place = PerfOp::InPlace::kSendInsideRecv;
  return run_perf(argc, argv, op);
}

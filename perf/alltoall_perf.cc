// bagua_alltoall_perf: nccl-tests' alltoall_perf (size = the whole buffer). busbw = algbw * (n-1)/n. No in-place form.
#include "common/collective_oracle.h"
#include "perf/perf_driver.h"

using namespace bagua::perf;
using namespace bagua::testing;

int main(int argc, char** argv) {
  PerfOp op;
  op.name = "alltoall";
  op.busbw = [](int n) { return static_cast<double>(n - 1) / n; };
  op.send_elems = op.recv_elems = [](size_t count, int n) { return count / n * n; };
  op.fill = [](void* send, size_t count, const PerfArgs& a, int rank, int n) {
    size_t block = count / n;
    for (int p = 0; p < n; ++p)
      fill_codes(static_cast<char*>(send) + p * block * bagua::datatype_size(a.dtype), block, a.dtype, rank, p);
  };
  op.check = [](const void* recv, size_t count, const PerfArgs& a, int rank, int n) {
    size_t block = count / n, wrong = 0;
    for (int p = 0; p < n; ++p)
      wrong += wrong_codes(static_cast<const char*>(recv) + p * block * bagua::datatype_size(a.dtype), block, a.dtype,
                           p, rank);
    return wrong;
  };
  op.run = [](const void* s, void* r, size_t count, const PerfArgs& a, bagua_comm_t comm) {
    int n = 1;
    bagua_comm_size(comm, &n);
    return bagua_alltoall(s, r, count / n, a.dtype, comm, a.stream);
  };
  op.in_place = PerfOp::InPlace::kNone;
  return run_perf(argc, argv, op);
}

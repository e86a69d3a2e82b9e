// bagua_sendrecv_perf: nccl-tests' sendrecv_perf: every rank sends to the next and receives from the
// previous one at the same time (one group). busbw = algbw. No in-place form.
#include "common/collective_oracle.h"
#include "perf/perf_driver.h"

using namespace bagua::perf;
using namespace bagua::testing;

int main(int argc, char** argv) {
  PerfOp op;
  op.name = "sendrecv";
  op.busbw = [](int) { return 1.0; };
  op.send_elems = op.recv_elems = [](size_t count, int) { return count; };
  op.fill = [](void* send, size_t count, const PerfArgs& a, int rank, int) {
    fill_codes(send, count, a.dtype, rank, 9);
  };
  op.check = [](const void* recv, size_t count, const PerfArgs& a, int rank, int n) {
    return wrong_codes(recv, count, a.dtype, (rank + n - 1) % n, 9);
  };
  op.run = [](const void* s, void* r, size_t count, const PerfArgs& a, bagua_comm_t comm) {
    int n = 1, rank = 0;
    bagua_comm_size(comm, &n);
    bagua_comm_rank(comm, &rank);
    bagua_group_start();
    bagua_send(s, count, a.dtype, (rank + 1) % n, comm, a.stream);
    bagua_recv(r, count, a.dtype, (rank + n - 1) % n, comm, a.stream);
    return bagua_group_end();
  };
  op.in_place = PerfOp::InPlace::kNone;
  return run_perf(argc, argv, op);
}

#include "algorithms/internal_ops.h"

#include "algorithms/collectives.h"
#include "kernels/dtype.h"

namespace bagua {

void run_to_completion(Comm& comm, Operation& op) {
  struct Release {
    Comm& comm;
    Operation& op;
    ~Release() { comm.forget(op); }
  } release{comm, op};
  comm.start(op);
  comm.wait(op);
}

void allreduce_now(Comm& comm, const void* sendbuf, void* recvbuf, size_t count, bagua_datatype_t dtype,
                   bagua_redop_t op) {
  comm.check_usable();
  CollectiveArgs args;
  args.collective = Collective::kAllreduce;
  args.sendbuf = sendbuf;
  args.recvbuf = recvbuf;
  args.count = count;
  args.dtype = dtype;
  args.op = op;
  const int n = comm.size();
  Algorithm algorithm = comm.selector().choose(args.collective, args.message_bytes(n), n, comm.hosts());
  ScheduleContext ctx{comm.rank(),
                      n,
                      comm.id(),
                      comm.next_collective_sequence(),
                      tag_kind_of(args.collective),
                      dtype,
                      op,
                      comm.config().ring_segment_bytes,
                      comm.config().ring_window,
                      comm.ring_order(),
                      comm.hosts(),
                      [&comm] { comm.check_peers_now(); }};
  auto operation = build_collective(args, algorithm, ctx,
                                    fmt::format("allreduce #{} ({} x {}, {}, internal)", ctx.sequence, count,
                                                datatype_name(dtype), algorithm_name(algorithm)));
  run_to_completion(comm, *operation);
}

}  // namespace bagua

// The nccl-tests-style driver shared by every perf tool: flags, the sweep over sizes, timing, data checks
// and the table. Each tool describes its operation in one PerfOp.
//
// Flags (as nccl-tests): -b min bytes, -e max bytes, -f size factor, -n iterations, -w warm-up iterations,
// -c check data (0/1), -d datatype, -o reduction op, -r root, -M host|device (where the buffers live), and -W 1:
// write the input before every call, as an application does, and time the calls alone (host memory). Sizes take
// K, M, G suffixes. On device memory the calls are stream-ordered on one stream and each timing ends with a
// synchronize of it, as in nccl-tests; each row also gives the bound for ranks that share one GPU,
// busbw <= B (n-1)/n^2, where B is device-to-device copy traffic (bytes read + written per second) measured at
// that size in the same run.
#pragma once

#include <functional>
#include <string>

#include "bagua/bagua.h"

namespace bagua::perf {

struct PerfArgs {
  size_t min_bytes = 4 << 10;
  size_t max_bytes = 64 << 20;
  double factor = 2.0;
  int iterations = 20;
  int warmup = 5;
  bool check = true;
  bagua_datatype_t dtype = BAGUA_FLOAT32;
  bagua_redop_t op = BAGUA_SUM;
  int root = 0;
  bool device = false;       // -M device
  bool write_input = false;  // -W 1: the input is written before every call (its lines sit dirty in this core's cache)
  void* stream = nullptr;    // the stream of device calls (tools pass it to every call)
};

// One collective, as nccl-tests describes it. `count` is the table's count column: elements of the size
// column (the total message) divided by the datatype size.
struct PerfOp {
  const char* name;
  double busbw_factor(int nranks) const { return busbw(nranks); }
  std::function<double(int nranks)> busbw;
  // Elements in the send and receive buffers for a table count.
  std::function<size_t(size_t count, int nranks)> send_elems, recv_elems;
  // Fills this rank's input for a data check.
  std::function<void(void* send, size_t count, const PerfArgs&, int rank, int nranks)> fill;
  // Wrong elements in this rank's output (0 where the rank has no output).
  std::function<size_t(const void* recv, size_t count, const PerfArgs&, int rank, int nranks)> check;
  std::function<bagua_status_t(const void* sendbuf, void* recvbuf, size_t count, const PerfArgs&, bagua_comm_t)> run;
  // In-place form: the send pointer given the receive buffer (or the reverse, send_is_base), or no in-place form.
  enum class InPlace { kNone, kSame, kSendInsideRecv, kRecvInsideSend } in_place = InPlace::kSame;
  bool uses_op = false;
  bool uses_root = false;
};

// Parses argv, forms the communicator from the environment, runs the sweep, prints the table on rank 0.
// Returns the process exit code (non-zero on any error or wrong result).
int run_perf(int argc, char** argv, const PerfOp& op);

}  // namespace bagua::perf

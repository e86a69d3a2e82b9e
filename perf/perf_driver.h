// The nccl-tests-style driver shared by every perf tool: flags, the sweep over sizes, timing, data checks
// and the table. Each tool describes its operation in one PerfOp.
//
// Flags (as nccl-tests): -b min bytes, -e max bytes, -f size factor, -n iterations, -w warm-up iterations,
// -c check data (0/1), -d datatype, -o reduction op. Sizes take K, M, G suffixes.
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
};

struct PerfOp {
  const char* name;
  // nccl-tests' bus bandwidth factor for this operation on n ranks.
  std::function<double(int nranks)> busbw_factor;
  // Runs the operation once on `count` elements (in place when sendbuf == recvbuf).
  std::function<bagua_status_t(const void* sendbuf, void* recvbuf, size_t count, const PerfArgs& args,
                               bagua_comm_t comm)>
      run;
  bool uses_op = true;
};

// Parses argv, forms the communicator from the environment, runs the sweep, prints the table on rank 0.
// Returns the process exit code (non-zero on any error or wrong result).
int run_perf(int argc, char** argv, const PerfOp& op);

}  // namespace bagua::perf

#include "perf/perf_driver.h"

#include <getopt.h>
#include <strings.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "common/collective_oracle.h"
#include "kernels/device_runtime.h"
#include "kernels/dtype.h"

namespace bagua::perf {

namespace {

size_t parse_size(const char* text) {
  char* end = nullptr;
  double value = std::strtod(text, &end);
  switch (*end) {
    case 'K':
    case 'k': value *= 1024; break;
    case 'M':
    case 'm': value *= 1024 * 1024; break;
    case 'G':
    case 'g': value *= 1024.0 * 1024 * 1024; break;
    default: break;
  }
  return static_cast<size_t>(value);
}

bool parse_dtype(const char* text, bagua_datatype_t* out) {
  struct Alias {
    const char* name;
    bagua_datatype_t type;
  };
  static const Alias kAliases[] = {{"int8", BAGUA_INT8},         {"uint8", BAGUA_UINT8},     {"int32", BAGUA_INT32},
                                   {"int", BAGUA_INT32},         {"uint32", BAGUA_UINT32},   {"int64", BAGUA_INT64},
                                   {"uint64", BAGUA_UINT64},     {"float16", BAGUA_FLOAT16}, {"half", BAGUA_FLOAT16},
                                   {"bfloat16", BAGUA_BFLOAT16}, {"float32", BAGUA_FLOAT32}, {"float", BAGUA_FLOAT32},
                                   {"float64", BAGUA_FLOAT64},   {"double", BAGUA_FLOAT64}};
  for (const Alias& a : kAliases)
    if (strcasecmp(text, a.name) == 0) {
      *out = a.type;
      return true;
    }
  return false;
}

bool parse_op(const char* text, bagua_redop_t* out) {
  for (int o = 0; o < kNumRedops; ++o)
    if (strcasecmp(text, redop_name(static_cast<bagua_redop_t>(o))) == 0) {
      *out = static_cast<bagua_redop_t>(o);
      return true;
    }
  return false;
}

[[noreturn]] void usage(const char* tool) {
  std::fprintf(
      stderr,
      "usage: %s [-b minbytes] [-e maxbytes] [-f factor] [-n iters] [-w warmup] [-c 0|1] [-d dtype] [-o op] [-r root]\n"
      "       [-M host|device] [-W 0|1]\n"
      "  run under a launcher, e.g. bagua-run -n 2 %s -b 4K -e 64M -f 4\n",
      tool, tool);
  std::exit(2);
}

PerfArgs parse_args(int argc, char** argv) {
  PerfArgs args;
  int c;
  while ((c = getopt(argc, argv, "b:e:f:n:w:c:d:o:r:M:W:h")) != -1) {
    switch (c) {
      case 'b': args.min_bytes = parse_size(optarg); break;
      case 'e': args.max_bytes = parse_size(optarg); break;
      case 'f': args.factor = std::atof(optarg); break;
      case 'n': args.iterations = std::atoi(optarg); break;
      case 'w': args.warmup = std::atoi(optarg); break;
      case 'c': args.check = std::atoi(optarg) != 0; break;
      case 'd':
        if (!parse_dtype(optarg, &args.dtype)) usage(argv[0]);
        break;
      case 'o':
        if (!parse_op(optarg, &args.op)) usage(argv[0]);
        break;
      case 'r': args.root = std::atoi(optarg); break;
      case 'M':
        if (std::strcmp(optarg, "host") != 0 && std::strcmp(optarg, "device") != 0) usage(argv[0]);
        args.device = std::strcmp(optarg, "device") == 0;
        break;
      case 'W': args.write_input = std::atoi(optarg) != 0; break;
      default: usage(argv[0]);
    }
  }
  if (args.write_input && args.device) {
    std::fprintf(stderr, "-W 1 writes host memory: it does not go with -M device\n");
    usage(argv[0]);
  }
  if (args.factor <= 1.0 || args.iterations < 1 || args.warmup < 0 || args.min_bytes > args.max_bytes) usage(argv[0]);
  return args;
}

struct Measurement {
  double micros = 0;    // average per iteration, slowest rank
  long long wrong = 0;  // wrong elements, summed over ranks
};

// A buffer the calls get: host memory, or device memory with a host image for filling and checking.
struct Buffer {
  std::vector<unsigned char> host;
  unsigned char* device = nullptr;
  Buffer() = default;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer() {
    if (device) device_runtime().free_device(device);
  }
  void assign(size_t bytes, bool on_device) {
    host.assign(bytes, 0);
    if (!on_device) return;
    device = static_cast<unsigned char*>(device_runtime().alloc_device(bytes, 0));
    if (device == nullptr) {
      std::fprintf(stderr, "out of device memory (%zu bytes)\n", bytes);
      std::exit(1);
    }
  }
  unsigned char* data() { return device ? device : host.data(); }
  void upload(void* stream) {
    if (device) device_runtime().copy_async(device, host.data(), host.size(), stream);
  }
  void download(void* stream) {
    if (device) device_runtime().copy_async(host.data(), device, host.size(), stream);
  }
  bool holds(const void* p) {
    auto* q = static_cast<const unsigned char*>(p);
    return q >= data() && q < data() + host.size();
  }
  // The host image's address for an address inside data().
  void* image_of(const void* p) {
    return device ? host.data() + (static_cast<const unsigned char*>(p) - device) : const_cast<void*>(p);
  }
};

void wait_stream(const PerfArgs& args) {
  if (args.device) device_runtime().synchronize(args.stream, 600000);
}

#define PERF_OK(call)                                                                                      \
  do {                                                                                                     \
    bagua_status_t s_ = (call);                                                                            \
    if (s_ != BAGUA_SUCCESS) {                                                                             \
      std::fprintf(stderr, "%s: %s: %s\n", #call, bagua_status_string(s_), bagua_get_last_error(nullptr)); \
      std::exit(1);                                                                                        \
    }                                                                                                      \
  } while (0)

struct Buffers {
  Buffer send, recv;
};

// The pointers for one call. In place, they point into one allocation as the call requires: the same
// buffer, this rank's (or the root's) block of the receive buffer as input, or the reverse.
std::pair<const void*, void*> call_buffers(const PerfOp& op, bool in_place, Buffers& b, size_t count, int rank,
                                           int nranks, int root, size_t elem) {
  const void* send = b.send.data();
  void* recv = b.recv.data();
  if (!in_place) return {send, recv};
  int owner = op.uses_root ? root : rank;
  bool applies = !op.uses_root || rank == root;  // rooted calls are in place on the root only
  switch (op.in_place) {
    case PerfOp::InPlace::kSame: return {recv, recv};
    case PerfOp::InPlace::kSendInsideRecv:
      if (applies) return {b.recv.data() + owner * op.send_elems(count, nranks) * elem, recv};
      return {send, recv};
    case PerfOp::InPlace::kRecvInsideSend:
      if (applies) return {send, b.send.data() + owner * op.recv_elems(count, nranks) * elem};
      return {send, recv};
    case PerfOp::InPlace::kNone: break;
  }
  return {send, recv};
}

Measurement measure(const PerfOp& op, const PerfArgs& args, bagua_comm_t comm, int rank, int nranks, size_t count,
                    bool in_place, Buffers& bufs) {
  auto [sendbuf, recvbuf] = call_buffers(op, in_place, bufs, count, rank, nranks, args.root, datatype_size(args.dtype));
  for (int i = 0; i < args.warmup; ++i) PERF_OK(op.run(sendbuf, recvbuf, count, args, comm));
  wait_stream(args);
  PERF_OK(bagua_barrier(comm, nullptr));
  double micros = 0;
  if (args.write_input) {
    // Finite floats whichever the datatype is read as; the values do not matter, only that the lines are written.
    const size_t send_bytes = op.send_elems(count, nranks) * datatype_size(args.dtype);
    for (int i = 0; i < args.iterations; ++i) {
      std::memset(const_cast<void*>(sendbuf), 0x3e + (i & 1), send_bytes);
      auto start = std::chrono::steady_clock::now();
      PERF_OK(op.run(sendbuf, recvbuf, count, args, comm));
      micros += std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
    }
    micros /= args.iterations;
  } else {
    auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < args.iterations; ++i) PERF_OK(op.run(sendbuf, recvbuf, count, args, comm));
    wait_stream(args);
    micros =
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count() / args.iterations;
  }
  Measurement m;
  PERF_OK(bagua_allreduce(&micros, &m.micros, 1, BAGUA_FLOAT64, BAGUA_MAX, comm, nullptr));
  if (args.check) {
    // One more run on inputs whose result is exact (tests/common/collective_oracle.h), compared bit for bit.
    // In place the input lies inside the receive buffer: fill the image it belongs to.
    Buffer& send_owner = bufs.recv.holds(sendbuf) ? bufs.recv : bufs.send;
    Buffer& recv_owner = bufs.send.holds(recvbuf) ? bufs.send : bufs.recv;
    op.fill(send_owner.image_of(sendbuf), count, args, rank, nranks);
    send_owner.upload(args.stream);
    PERF_OK(op.run(sendbuf, recvbuf, count, args, comm));
    recv_owner.download(args.stream);
    wait_stream(args);
    long long wrong = static_cast<long long>(op.check(recv_owner.image_of(recvbuf), count, args, rank, nranks));
    PERF_OK(bagua_allreduce(&wrong, &m.wrong, 1, BAGUA_INT64, BAGUA_SUM, comm, nullptr));
  }
  return m;
}

// Device-to-device copy traffic at this size (bytes read + written per second, GB/s): the median of 5 timings of
// 10 copies each.
double copy_traffic_gbps(const PerfArgs& args, size_t bytes) {
  Buffer a, b;
  a.assign(bytes, true);
  b.assign(bytes, true);
  std::vector<double> gbps;
  for (int round = 0; round < 5; ++round) {
    auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < 10; ++i) device_runtime().copy_async(b.device, a.device, bytes, args.stream);
    wait_stream(args);
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    gbps.push_back(2.0 * static_cast<double>(bytes) * 10 / seconds / 1e9);
  }
  std::sort(gbps.begin(), gbps.end());
  return gbps[2];
}

}  // namespace

int run_perf(int argc, char** argv, const PerfOp& op) {
  PerfArgs args = parse_args(argc, argv);
  if (args.device) {
    if (!device_runtime().usable()) {
      std::fprintf(stderr, "-M device: no CUDA device (BAGUA_DEVICE_STANDIN=1 runs the host stand-in)\n");
      return 2;
    }
    args.stream = device_runtime().create_stream(0);
  }
  bagua_comm_t comm = nullptr;
  PERF_OK(bagua_comm_init_from_env(&comm));
  int rank = 0, nranks = 1;
  PERF_OK(bagua_comm_rank(comm, &rank));
  PERF_OK(bagua_comm_size(comm, &nranks));
  if (args.root < 0 || args.root >= nranks) usage(argv[0]);
  size_t elem = datatype_size(args.dtype);
  if (rank == 0) {
    std::printf("# bagua %s_perf: %d ranks, %d iterations, %d warm-up, check %d, %s memory%s%s%s\n", op.name, nranks,
                args.iterations, args.warmup, args.check ? 1 : 0, args.device ? "device" : "host",
                args.device ? ", runtime " : "", args.device ? device_runtime().name() : "",
                args.write_input ? ", input written before every call (calls timed alone)" : "");
    if (args.device)
      std::printf("# bound: busbw <= B (n-1)/n^2 for ranks sharing one GPU, B = device-to-device copy traffic\n");
    std::printf("#%53s %38s %38s\n", "", "out-of-place", "in-place");
    std::printf("# %10s %12s %8s %6s %6s %9s %7s %7s %6s %9s %7s %7s %6s%s\n", "size", "count", "type", "redop", "root",
                "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong", args.device ? "   bound" : "");
    std::printf("# %10s %12s %8s %6s %6s %9s %7s %7s %6s %9s %7s %7s %6s%s\n", "(B)", "(elements)", "", "", "", "(us)",
                "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "", args.device ? "  (GB/s)" : "");
  }
  long long total_wrong = 0;
  for (size_t bytes = args.min_bytes; bytes <= args.max_bytes;) {
    size_t count = bytes / elem;
    Buffers bufs;
    bufs.send.assign(std::max<size_t>(1, op.send_elems(count, nranks)) * elem, args.device);
    bufs.recv.assign(std::max<size_t>(1, op.recv_elems(count, nranks)) * elem, args.device);
    op.fill(bufs.send.host.data(), count, args, rank, nranks);
    bufs.send.upload(args.stream);
    bufs.recv.upload(args.stream);
    Measurement oop = measure(op, args, comm, rank, nranks, count, false, bufs);
    Measurement inp;
    bool has_in_place = op.in_place != PerfOp::InPlace::kNone;
    if (has_in_place) inp = measure(op, args, comm, rank, nranks, count, true, bufs);
    total_wrong += oop.wrong + inp.wrong;
    if (rank == 0) {
      double gb = static_cast<double>(count * elem) / 1e9;
      double factor = op.busbw(nranks);
      auto algbw = [&](double us) { return gb / (us / 1e6); };
      std::printf("  %10zu %12zu %8s %6s %6d %9.2f %7.2f %7.2f %6lld", count * elem, count, datatype_name(args.dtype),
                  op.uses_op ? redop_name(args.op) : "none", op.uses_root ? args.root : -1, oop.micros,
                  algbw(oop.micros), algbw(oop.micros) * factor, args.check ? oop.wrong : -1LL);
      if (has_in_place)
        std::printf(" %9.2f %7.2f %7.2f %6lld", inp.micros, algbw(inp.micros), algbw(inp.micros) * factor,
                    args.check ? inp.wrong : -1LL);
      else
        std::printf(" %9s %7s %7s %6s", "n/a", "n/a", "n/a", "n/a");
      if (args.device) std::printf(" %7.2f", copy_traffic_gbps(args, count * elem) * (nranks - 1) / nranks / nranks);
      std::printf("\n");
      std::fflush(stdout);
    }
    size_t next = static_cast<size_t>(static_cast<double>(bytes) * args.factor);
    bytes = next > bytes ? next : bytes + 1;
  }
  if (rank == 0) std::printf("# wrong elements in total: %lld\n", total_wrong);
  PERF_OK(bagua_comm_destroy(comm));
  return total_wrong == 0 ? 0 : 1;
}

}  // namespace bagua::perf

#include "algorithms/quantized/quantized_allreduce.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>

#include "algorithms/cost_model.h"
#include "algorithms/dispatch.h"
#include "algorithms/patterns/ring.h"
#include "algorithms/registry.h"
#include "algorithms/schedule.h"
#include "base/error.h"
#include "base/scratch_cache.h"
#include "core/device_proxy.h"
#include "kernels/cpu/reduce.h"
#include "kernels/device_runtime.h"
#include "kernels/dtype.h"
#include "kernels/quantize.h"

namespace bagua {

namespace {

size_t aligned(size_t bytes) { return (bytes + 63) / 64 * 64; }

// Carves one scratch allocation into pieces (sizes first, then addresses); sizes are checked for overflow.
class ScratchPlan {
 public:
  size_t add(size_t bytes) {
    if (bytes > SIZE_MAX / 2 - total_) fail(BAGUA_ERR_INVALID_ARGUMENT, "quantized allreduce scratch overflows size_t");
    size_t at = total_;
    total_ += aligned(bytes);
    return at;
  }
  static size_t times(size_t a, size_t b) {
    if (b != 0 && a > SIZE_MAX / 2 / b)
      fail(BAGUA_ERR_INVALID_ARGUMENT, "quantized allreduce scratch overflows size_t");
    return a * b;
  }
  size_t total() const { return total_; }

 private:
  size_t total_ = 0;
};

// Where the compressed blocks of slice `local` sit in one buffer (64-byte aligned), and at [m] its length: a rail
// rank holds its slice of the result this way and sends it to its host in one message.
std::vector<size_t> result_layout(const QuantizedGroup& grp, const Codec& codec, size_t count, int local) {
  const int m = static_cast<int>(grp.members.size());
  std::vector<size_t> at(m + 1, 0);
  size_t end = 0;
  for (int j = 0; j < m; ++j) {
    at[j] = aligned(end);
    end = at[j] + codec.compressed_bytes(grp.block_count_in(count, local, j));
  }
  at[m] = end;
  return at;
}

// One scratch area of a call: x, the host's inputs, compressed blocks out and in, my reduced block.
struct ScratchLayout {
  size_t x_at = 0, local_at = 0, mine_at = 0, result_at = 0, total = 0;
  // On the device: the input and the output where they cross the wire at full precision (hierarchical forms).
  size_t send_stage_at = 0, recv_stage_at = 0;
  // On the device, x and an fp32 copy of one host peer's fp16/bf16 slice are device memory (x_at and peer_x_at
  // are offsets there), of device_total bytes.
  size_t peer_x_at = 0, device_total = 0;
  std::vector<size_t> block_at, in_at;
  std::vector<size_t> layout;  // the compressed blocks of my slice, `mine` among them (result_layout)
  std::vector<size_t> peer_result_at;
};

// on_device: fp32 accumulates in the output (no acc).
ScratchLayout layout_scratch(const QuantizedGroup& grp, const Codec& codec, size_t count, bagua_datatype_t dtype,
                             bool on_device) {
  const int m = static_cast<int>(grp.members.size()), g = grp.index;
  const bool member = g >= 0;
  const int nlocal = static_cast<int>(grp.local_peers.size());
  const bool own_x = member && (dtype != BAGUA_FLOAT32 || nlocal > 0);
  const size_t elem = datatype_size(dtype);
  ScratchLayout l;
  ScratchPlan plan, device_plan;
  l.x_at = (on_device ? device_plan : plan).add(own_x ? ScratchPlan::times(count, sizeof(float)) : 0);
  l.local_at =
      plan.add(ScratchPlan::times(static_cast<size_t>(nlocal), ScratchPlan::times(grp.slice_count(count), elem)));
  l.block_at.assign(m, 0);
  l.in_at.assign(m, 0);
  l.peer_result_at.assign(grp.rail ? nlocal : 0, 0);
  if (member && m > 1) {
    const size_t own_count = grp.block_count(count, g);
    l.layout = result_layout(grp, codec, count, grp.local_index);
    l.result_at = plan.add(l.layout[m]);
    for (int j = 0; j < m; ++j) {
      l.block_at[j] = l.result_at + l.layout[j];
      if (j != g) l.in_at[j] = plan.add(codec.compressed_bytes(own_count));
    }
    l.mine_at = l.block_at[g];
    for (int k = 0; k < static_cast<int>(l.peer_result_at.size()); ++k) {
      const int theirs = k < grp.local_index ? k : k + 1;
      l.peer_result_at[k] = plan.add(result_layout(grp, codec, count, theirs)[m]);
    }
  }
  if (on_device && grp.hierarchical) {
    const size_t all = ScratchPlan::times(count, elem);
    l.send_stage_at = plan.add((grp.rail ? nlocal > 0 : !member) ? all : 0);
    l.recv_stage_at = plan.add(!grp.rail || !(member && m > 1) ? all : 0);
    l.peer_x_at = device_plan.add(
        dtype != BAGUA_FLOAT32 && nlocal > 0 ? ScratchPlan::times(grp.slice_count(count), sizeof(float)) : 0);
  }
  l.total = plan.total();
  l.device_total = device_plan.total();
  return l;
}

}  // namespace

namespace {

// The local work of one call: what the schedule's steps run between its rounds.
struct QuantizedWork {
  Codec codec;
  QuantizedGroup group;
  Comm* comm;
  const void* sendbuf;
  void* recvbuf;
  size_t count;
  bagua_datatype_t dtype;
  bool avg;
  uint64_t step;
  float* worker_error;
  float* owner_error;
  // scratch pieces
  float* x;                           // fp32 input (sendbuf itself for fp32 when no host sum)
  bool own_x;                         // x is scratch
  uint8_t* local_in;                  // hierarchical leader: its host's inputs, in local_peers order
  std::vector<uint8_t*> block;        // [j]: my compressed copy of block j, later owner j's result
  std::vector<uint8_t*> in;           // [j]: rank j's compressed copy of my block
  uint8_t* mine;                      // my reduced block, compressed
  float* acc;                         // (device) my reduced block, fp32 (x's own block when x is scratch)
  std::vector<uint8_t*> peer_result;  // rail: [k] local peer k's compressed slice of the result
  // Set when this rank compresses on the device: sendbuf, recvbuf and the error feedback are device memory, the
  // scratch is the operation's mapped staging. Every step launches on the operation's stream, or (the operation
  // computes on the caller's stream) the phases enqueue the steps' work on phase_stream at the call.
  DeviceOperation* device = nullptr;
  DeviceStream phase_stream = nullptr;
  uint8_t* send_stage = nullptr;  // (device, hierarchical) ScratchLayout's stages
  uint8_t* recv_stage = nullptr;
  float* peer_x = nullptr;

  int m() const { return static_cast<int>(group.members.size()); }
  int peer_local_index(int k) const { return k < group.local_index ? k : k + 1; }
  size_t offset(int j) const { return group.block_offset(count, j); }
  size_t length(int j) const { return group.block_count(count, j); }
  RoundingKey key(size_t index_base) const {
    return RoundingKey{codec.stochastic(), codec.seed(), step, static_cast<uint32_t>(comm->rank()), index_base};
  }

  // x over the group's slice: this rank's input, plus (hierarchical) its host peers' copies of the slice.
  void prepare() {
    if (!own_x) return;
    const size_t elem = datatype_size(dtype), begin = group.slice_begin(count), n = group.slice_count(count);
    const uint8_t* own = static_cast<const uint8_t*>(sendbuf) + begin * elem;
    const size_t npeers = group.local_peers.size();
    if (device) {  // the same sums as below: own input first, then the host's (received into staging) by rank
      launch([&](DeviceRuntime& rt, DeviceStream s) {
        rt.convert_async(x + begin, BAGUA_FLOAT32, own, dtype, n, s);
        for (size_t k = 0; k < npeers; ++k) {
          const uint8_t* src = local_in + k * n * elem;
          if (dtype != BAGUA_FLOAT32) rt.convert_async(peer_x, BAGUA_FLOAT32, src, dtype, n, s);
          rt.reduce_async(x + begin, x + begin, dtype != BAGUA_FLOAT32 ? static_cast<const void*>(peer_x) : src, n,
                          BAGUA_FLOAT32, BAGUA_SUM, s);
        }
      });
      return;
    }
    size_t first_peer = 0;
    if (dtype == BAGUA_FLOAT32 && npeers > 0) {  // own + the first peer in one pass (the same sum as copy, then add)
      reduce_from(x + begin, own, local_in, n, BAGUA_FLOAT32, BAGUA_SUM);
      first_peer = 1;
    } else if (dtype == BAGUA_FLOAT32) {
      std::memcpy(x + begin, own, n * sizeof(float));
    } else {
      cast_to_float(own, dtype, n, x + begin);
    }
    std::vector<float> peer(dtype == BAGUA_FLOAT32 ? 0 : n);
    for (size_t k = first_peer; k < npeers; ++k) {  // own input first, then the host's by ascending rank
      const uint8_t* src = local_in + k * n * elem;
      const float* values = reinterpret_cast<const float*>(src);
      if (dtype != BAGUA_FLOAT32) {
        cast_to_float(src, dtype, n, peer.data());
        values = peer.data();
      }
      reduce_from(x + begin, x + begin, values, n, BAGUA_FLOAT32, BAGUA_SUM);
    }
  }
  // Device work of this call, on the device operation's stream (or the caller's, while a phase is enqueued).
  template <typename F>
  void launch(F&& work) {
    if (device->computes_on_caller_stream())
      work(device->proxy().runtime(), phase_stream);
    else
      device->issue_work([&](DeviceStream s) { work(device->proxy().runtime(), s); });
  }
  void compress(const float* values, size_t n, float* error, const RoundingKey& k, uint8_t* out) {
    if (!device) {
      codec.compress(values, n, error, k, out);
      return;
    }
    launch([&](DeviceRuntime& rt, DeviceStream s) { rt.compress_async(codec.spec(), values, n, error, k, out, s); });
  }
  void decompress(const uint8_t* bytes, size_t n, float* out, bool accumulate) {
    if (!device) {
      if (accumulate)
        codec.decompress_accumulate(bytes, n, out);
      else
        codec.decompress(bytes, n, out);
      return;
    }
    launch([&](DeviceRuntime& rt, DeviceStream s) { rt.decompress_async(codec.spec(), bytes, n, out, accumulate, s); });
  }
  // (device) bytes between device memory and the staging, after the kernels before.
  void copy_bytes(void* dst, const void* src, size_t bytes) {
    if (bytes > 0) launch([&](DeviceRuntime& rt, DeviceStream s) { rt.copy_async(dst, src, bytes, s); });
  }
  void copy_floats(float* dst, const float* src, size_t n) {
    if (!device) {
      std::memmove(dst, src, n * sizeof(float));
      return;
    }
    launch([&](DeviceRuntime& rt, DeviceStream s) { rt.copy_async(dst, src, n * sizeof(float), s); });
  }
  // My compressed copy of owner j's block (with my worker error feedback).
  void compress_block(int j) {
    size_t off = offset(j);
    compress(x + off, length(j), worker_error ? worker_error + off : nullptr, key(off), block[j]);
  }
  // The owner's sum, input by input as they arrive (own block first), then its compressed form.
  void owner_begin() {
    if (acc != x + offset(group.index)) copy_floats(acc, x + offset(group.index), length(group.index));
  }
  void owner_add(int j) { decompress(in[j], length(group.index), acc, true); }
  // My block's sum, compressed into `mine`.
  void owner_compress() { compress(acc, length(group.index), owner_error, key(offset(group.index)), mine); }
  // Host: the three steps above in one pass, once every input has arrived (own block first, then `from` in order).
  void owner_reduce(const std::vector<int>& from) {
    std::vector<const uint8_t*> inputs;
    for (int j : from) inputs.push_back(in[j]);
    const int g = group.index;
    codec.reduce_recompress(inputs.data(), static_cast<int>(inputs.size()), x + offset(g), length(g), owner_error,
                            key(offset(g)), mine);
  }
  // Block j into the output. Everyone decompresses the same bytes (the owner its own `mine` too): bit-identical
  // outputs.
  void finish(int j) {
    if (m() == 1) {
      finish_at(nullptr, offset(j), length(j));
    } else {
      finish_at(j == group.index ? mine : block[j], offset(j), length(j));
    }
  }
  // Rail: local peer k's slice of the result, from the compressed blocks it sent (laid out as its own `block`s).
  void finish_peer(int k) {
    const int theirs = peer_local_index(k);
    const std::vector<size_t> at = result_layout(group, codec, count, theirs);
    for (int j = 0; j < m(); ++j)
      finish_at(peer_result[k] + at[j], group.block_offset_in(count, theirs, j),
                group.block_count_in(count, theirs, j));
  }
  // The n elements at off into the output: decompressed from `in`, or (NULL) from x; then AVG's division and the
  // cast to the datatype.
  void finish_at(const uint8_t* in, size_t off, size_t n) {
    if (n == 0) return;
    const bool f32 = dtype == BAGUA_FLOAT32;
    float* out = (f32 ? static_cast<float*>(recvbuf) : x) + off;
    void* typed_out = static_cast<uint8_t*>(recvbuf) + off * datatype_size(dtype);
    if (in == nullptr) {
      if (out != x + off) copy_floats(out, x + off, n);
    } else {
      decompress(in, n, out, false);
    }
    if (!device) {
      if (avg) divide_by(out, n, BAGUA_FLOAT32, comm->size());
      if (!f32) cast_from_float(out, n, typed_out, dtype);
      return;
    }
    launch([&](DeviceRuntime& rt, DeviceStream s) {
      if (avg) rt.divide_async(out, n, BAGUA_FLOAT32, comm->size(), s);
      if (!f32) rt.convert_async(typed_out, dtype, out, BAGUA_FLOAT32, n, s);
    });
  }
};

// Input bytes below which a quantized allreduce sends full precision: BAGUA_QUANTIZED_MIN_BYTES, else the cost
// model's size for the communicator's layout. The same on every rank (the configuration is agreed at init).
size_t quantized_min_bytes(const Comm& comm) {
  if (comm.config().quantized_min_bytes >= 0) return static_cast<size_t>(comm.config().quantized_min_bytes);
  const CostModel model;
  return comm.nhosts() > 1 ? model.quantized_min_bytes_hosts : model.quantized_min_bytes_one_host;
}

// Compressed bytes per rank and phase up to which each phase runs in one round: BAGUA_QUANTIZED_ONE_ROUND_BYTES,
// else the cost model's.
size_t quantized_one_round_bytes(const Comm& comm) {
  if (comm.config().quantized_one_round_bytes >= 0) return static_cast<size_t>(comm.config().quantized_one_round_bytes);
  return CostModel{}.quantized_one_round_bytes;
}

// The latency path: a plain allreduce (the selector's choice for this size) of the input plus what error feedback
// owes, which is then zeroed, so that error feedback stays exact across the switch. The owed values go into
// recvbuf (the input is read first, so in place works); fp16/bf16 inputs keep their rounding to the datatype as
// the new residual.
std::unique_ptr<Operation> build_full_precision(Comm& comm, const QuantizedArgs& a, const Codec& codec,
                                                const QuantizedGroup& grp, float* worker, float* owner,
                                                const std::function<ScheduleContext()>& take_context) {
  const bool owes = worker != nullptr || owner != nullptr;
  CollectiveArgs args;
  args.collective = Collective::kAllreduce;
  args.sendbuf = owes ? a.recvbuf : a.sendbuf;
  args.recvbuf = a.recvbuf;
  args.count = a.count;
  args.dtype = a.dtype;
  args.op = a.op;
  check_collective_args(comm, args);  // fills in the extents the builders read
  const int n = comm.size();
  Algorithm algorithm = selector_of(comm).choose(Collective::kAllreduce, args.message_bytes(n), n, comm.hosts());
  if (owes) {  // nothing that can fail comes before this, so a refused call leaves the residuals as they were
    // Each element owes once: the owner's residual on its own block, the worker's elsewhere (in the shared-array
    // form both name one array; the separate worker array is zero on the own block).
    const size_t own_begin = grp.index >= 0 ? grp.block_offset(a.count, grp.index) : 0;
    const size_t own_end = grp.index >= 0 ? own_begin + grp.block_count(a.count, grp.index) : 0;
    auto owed = [&](size_t i) -> float& { return i >= own_begin && i < own_end ? owner[i - own_begin] : worker[i]; };
    if (a.dtype == BAGUA_FLOAT32) {
      const float* x = static_cast<const float*>(a.sendbuf);
      float* out = static_cast<float*>(a.recvbuf);
      for (size_t i = 0; i < a.count; ++i) {
        float& e = owed(i);
        out[i] = x[i] + e;
        e = 0.0f;
      }
    } else {
      std::vector<float> t(a.count), sent(a.count);
      cast_to_float(a.sendbuf, a.dtype, a.count, t.data());
      for (size_t i = 0; i < a.count; ++i) t[i] += owed(i);
      cast_from_float(t.data(), a.count, a.recvbuf, a.dtype);
      cast_to_float(a.recvbuf, a.dtype, a.count, sent.data());
      for (size_t i = 0; i < a.count; ++i) owed(i) = t[i] - sent[i];
    }
  }
  const ScheduleContext ctx = take_context();  // last: nothing fails after the sequence number is used up
  comm.count_quantized_full_precision();
  auto op = algorithm->build(
      args, ctx,
      fmt::format("quantized_allreduce #{} ({} x {}, {}: full precision below {} bytes, {})", ctx.sequence, a.count,
                  datatype_name(a.dtype), codec.describe(), quantized_min_bytes(comm), algorithm->name));
  op->count_as(BAGUA_OPKIND_QUANTIZED_ALLREDUCE);
  return op;
}

// The device work of a group member's forms on the caller's stream (DeviceOperation::compute_on_caller_stream): the
// host form's steps in the host form's order, so the bytes are the same.
// - rail, first: the input slices of the host's other ranks copied into the staging, for the exchange; leader: none
//   (its host's inputs come in);
// - compression: (rail, leader: the host's inputs summed into x) every block compressed for the alltoall;
// - once every input has arrived: this rank's block summed (own input first, the others in shift order) and
//   compressed for the allgather;
// - once the allgather has ended: the output decompressed (rail: the host's other slices too, from the compressed
//   results they sent; leader: then copied into the staging for the host's other ranks);
// - leader: none once the operation has ended (the last phase follows the call's gate).
void enqueue_phases(const std::shared_ptr<QuantizedWork>& w, const std::vector<int>& shifts, size_t own_count) {
  auto phase = [w](std::function<void(QuantizedWork&)> steps) {
    return [w, steps = std::move(steps)](DeviceStream stream) {
      w->phase_stream = stream;
      steps(*w);
    };
  };
  const int g = w->group.index, m = w->m(), nlocal = static_cast<int>(w->group.local_peers.size());
  auto to = [g, m](int k) { return (g + k) % m; };
  auto from = [g, m](int k) { return (g - k + m) % m; };
  const bool leader = w->group.hierarchical && !w->group.rail;
  std::vector<std::function<void(DeviceStream)>> phases;
  if (leader) phases.push_back(phase([](QuantizedWork&) {}));
  if (w->group.rail)
    phases.push_back(phase([nlocal](QuantizedWork& work) {
      const size_t elem = datatype_size(work.dtype);
      for (int k = 0; k < nlocal; ++k) {
        const int theirs = work.peer_local_index(k);
        const size_t at = work.group.slice_begin_of(work.count, theirs) * elem;
        work.copy_bytes(work.send_stage + at, static_cast<const uint8_t*>(work.sendbuf) + at,
                        work.group.slice_count_of(work.count, theirs) * elem);
      }
    }));
  phases.push_back(phase([shifts, to](QuantizedWork& work) {
    work.prepare();
    for (int k : shifts)
      if (work.length(to(k)) > 0) work.compress_block(to(k));
  }));
  phases.push_back(phase([shifts, own_count, from](QuantizedWork& work) {
    if (own_count == 0) return;
    work.owner_begin();
    for (int k : shifts) work.owner_add(from(k));
    work.owner_compress();
  }));
  phases.push_back(phase([g, m, nlocal, leader, from](QuantizedWork& work) {
    work.finish(g);
    for (int k = 1; k < m; ++k) work.finish(from(k));
    if (work.group.rail)
      for (int k = 0; k < nlocal; ++k) work.finish_peer(k);
    if (leader && nlocal > 0) work.copy_bytes(work.recv_stage, work.recvbuf, work.count * datatype_size(work.dtype));
  }));
  if (leader) phases.push_back(phase([](QuantizedWork&) {}));
  w->device->set_phases(std::move(phases));
}

}  // namespace

CallDetails quantized_details(size_t count, const Codec& codec) {
  // Chunk and hierarchical mode change the messages and the rounds; seed and error feedback stay local.
  return {count, mix_details(mix_details(hash_name(codec.describe().c_str()), codec.chunk()),
                             static_cast<uint64_t>(codec.hierarchical()))};
}

bool compresses_on_device(const Comm& comm, const QuantizedArgs& a, const QuantizedState* state) {
  if (state && state->shares_error()) return false;
  return a.count > 0 && a.count * datatype_size(a.dtype) >= quantized_min_bytes(comm);
}

bool compresses_on_caller_stream(const Comm& comm, const Codec& codec, const QuantizedState* state) {
  const QuantizedGroup grp = state ? state->group() : QuantizedGroup::of(comm, codec);
  return grp.index >= 0 && grp.members.size() > 1;
}

QuantizedDeviceMemory quantized_device_memory(const Comm& comm, const QuantizedArgs& a, const Codec& codec) {
  const ScratchLayout l = layout_scratch(QuantizedGroup::of(comm, codec), codec, a.count, a.dtype, true);
  return {l.total, l.device_total};
}

std::unique_ptr<Operation> build_quantized_allreduce(Comm& comm, const QuantizedArgs& a, const Codec& codec,
                                                     QuantizedState* state, const ScheduleContext* taken,
                                                     DeviceOperation* device) {
  // The error feedback where this call's kernels run (the first use on another side moves it).
  if (state && device)
    state->residual_to_device(device->device());
  else if (state)
    state->residual_to_host();
  auto w = std::make_shared<QuantizedWork>();
  w->codec = codec;
  w->group = state ? state->group() : QuantizedGroup::of(comm, codec);
  w->comm = &comm;
  w->sendbuf = a.sendbuf;
  w->recvbuf = a.recvbuf;
  w->count = a.count;
  w->dtype = a.dtype;
  w->avg = a.op == BAGUA_AVG;
  const QuantizedGroup& grp = w->group;
  auto context = [&] {  // taken last: nothing may fail after this rank has used up a sequence number
    return taken ? *taken : make_context(comm, TagKind::kQuantized, a.dtype, a.op, quantized_details(a.count, codec));
  };
  auto describe = [&](uint64_t sequence) {
    return fmt::format("quantized_allreduce #{} ({} x {}, {}{})", sequence, a.count, datatype_name(a.dtype),
                       codec.describe(), grp.rail ? ", rail" : (grp.hierarchical ? ", hierarchical" : ""));
  };
  // The form, for the flight recorder's counts by algorithm.
  const char* form = grp.rail ? "rail" : (grp.hierarchical ? "hierarchical" : "flat");
  if (a.count == 0) {
    ScheduleContext ctx = context();
    auto op = std::make_unique<ScheduleOp>(BAGUA_OPKIND_QUANTIZED_ALLREDUCE, describe(ctx.sequence),
                                           std::make_unique<Schedule>(ctx));
    op->set_algorithm("quantized_allreduce", form);
    return op;
  }
  if (a.count * datatype_size(a.dtype) < quantized_min_bytes(comm)) {
    auto op = build_full_precision(comm, a, codec, grp, state ? state->worker_error() : nullptr,
                                   state ? state->owner_error() : nullptr, context);
    if (state) state->next_step();  // as a quantized call would, so that stochastic draws stay numbered by call
    op->set_algorithm("quantized_allreduce", "full precision");
    return op;
  }

  const size_t count = a.count, elem = datatype_size(a.dtype);
  const int m = w->m(), g = grp.index;
  const bool member = g >= 0;
  const int nlocal = static_cast<int>(grp.local_peers.size());
  w->own_x = member && (a.dtype != BAGUA_FLOAT32 || nlocal > 0);
  w->device = device;
  const size_t own_count = member ? w->length(g) : 0;
  const ScratchLayout scratch = layout_scratch(grp, codec, count, a.dtype, device != nullptr);
  uint8_t* base;
  std::shared_ptr<uint8_t[]> own_scratch;
  const bool phased = device != nullptr && device->computes_on_caller_stream();
  if (phased && (m < 2 || !member))
    fail(BAGUA_ERR_INTERNAL,
         "quantized allreduce: only a member of a group of 2 or more computes on the caller's stream");
  unsigned char* device_scratch = !device ? nullptr : phased ? device->stream_scratch() : device->device_scratch();
  if (device) {
    if (device->staging_bytes() < scratch.total || (scratch.device_total > 0 && device_scratch == nullptr))
      fail(BAGUA_ERR_INTERNAL, "quantized allreduce: {} bytes of staging for {} of scratch", device->staging_bytes(),
           scratch.total);
    base = device->staging();
  } else if (state) {
    if (state->scratch().size() < scratch.total) state->scratch().resize(scratch.total);
    base = state->scratch().data();
  } else {
    own_scratch = take_scratch(scratch.total);
    base = own_scratch.get();
  }
  ScheduleContext ctx = context();
  auto s = std::make_unique<Schedule>(ctx);
  std::string description = describe(ctx.sequence);
  w->step = state ? state->next_step() : ctx.sequence;
  w->worker_error = state ? state->worker_error() : nullptr;
  w->owner_error = state ? state->owner_error() : nullptr;
  if (own_scratch) s->hold(own_scratch);
  if (state && !phased) {  // (phased: its device work is ordered on one stream with the state's other calls)
    state->busy = true;
    s->hold(std::shared_ptr<void>(nullptr, [state](void*) { state->busy = false; }));
  }
  uint8_t* fp32_base = device ? device_scratch : base;  // x and peer_x
  w->x = w->own_x ? reinterpret_cast<float*>(fp32_base + scratch.x_at)
                  : const_cast<float*>(static_cast<const float*>(a.sendbuf));
  w->local_in = base + scratch.local_at;
  w->block.resize(m);
  w->in.resize(m);
  for (int j = 0; j < m; ++j) {
    w->block[j] = base + scratch.block_at[j];
    w->in[j] = base + scratch.in_at[j];
  }
  w->mine = base + scratch.mine_at;
  const size_t own_offset = member ? w->offset(g) : 0;
  if (member && m > 1 && w->own_x)
    w->acc = w->x + own_offset;
  else if (device)  // fp32 on the device: the own block of the output, written last by its own finish
    w->acc = static_cast<float*>(a.recvbuf) + own_offset;
  else  // the host sums in owner_reduce's slices
    w->acc = nullptr;
  for (size_t at : scratch.peer_result_at) w->peer_result.push_back(base + at);
  w->send_stage = base + scratch.send_stage_at;
  w->recv_stage = base + scratch.recv_stage_at;
  w->peer_x = reinterpret_cast<float*>(fp32_base + scratch.peer_x_at);
  const std::vector<size_t>& layout = scratch.layout;
  const size_t result_at = scratch.result_at;
  for (int j = 0; j + 1 < static_cast<int>(layout.size()); ++j) {  // the gaps go on the wire: no stale bytes
    const size_t used = layout[j] + codec.compressed_bytes(grp.block_count(count, j));
    std::memset(base + result_at + used, 0, layout[j + 1] - used);
  }
  s->hold(w);

  QuantizedWork* work = w.get();
  auto timed = [work, phased](std::function<void()> task) {
    if (phased) return call_step([] {});  // the phases enqueued this work at the call
    return call_step([work, task = std::move(task)] {
      auto t0 = std::chrono::steady_clock::now();
      task();
      auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count();
      work->comm->add_compute_ns(static_cast<uint64_t>(ns));
    });
  };

  // On the device, what crosses the wire at full precision goes through the staging: the input from send_stage,
  // the output through recv_stage (copied out of and into device memory around the rounds).
  const uint8_t* full_send = device ? w->send_stage : static_cast<const uint8_t*>(a.sendbuf);
  uint8_t* full_out = device ? w->recv_stage : static_cast<uint8_t*>(a.recvbuf);
  auto stage_input = [&](size_t begin, size_t n) {
    if (device && n > 0)
      s->then(timed([work, at = begin * elem, bytes = n * elem] {
        work->copy_bytes(work->send_stage + at, static_cast<const uint8_t*>(work->sendbuf) + at, bytes);
      }));
  };
  auto stage_output = [&](size_t begin, size_t n) {  // recvbuf -> recv_stage
    if (device && n > 0)
      s->then(timed([work, at = begin * elem, bytes = n * elem] {
        work->copy_bytes(work->recv_stage + at, static_cast<const uint8_t*>(work->recvbuf) + at, bytes);
      }));
  };
  auto unstage_output = [&](Round& round, size_t begin, size_t n) {  // recv_stage -> recvbuf, once received
    if (device && n > 0)
      round.after.push_back(timed([work, at = begin * elem, bytes = n * elem] {
        work->copy_bytes(static_cast<uint8_t*>(work->recvbuf) + at, work->recv_stage + at, bytes);
      }));
  };
  // Every rank emits the same rounds (some empty) so that round numbers, hence tags, agree.
  if (grp.rail) {  // each slice of the host's inputs to the slice's rank, at full precision
    for (int k = 0; k < nlocal; ++k) {
      const int theirs = w->peer_local_index(k);
      stage_input(grp.slice_begin_of(count, theirs), grp.slice_count_of(count, theirs));
    }
    Round& exchange = s->round();
    const size_t mine = grp.slice_count(count);
    for (int k = 0; k < nlocal; ++k) {
      const int peer = grp.local_peers[k];
      const int theirs = w->peer_local_index(k);
      const size_t n = grp.slice_count_of(count, theirs);
      if (mine > 0) exchange.recvs.push_back({peer, w->local_in + static_cast<size_t>(k) * mine * elem, mine * elem});
      if (n > 0) exchange.sends.push_back({peer, full_send + grp.slice_begin_of(count, theirs) * elem, n * elem});
    }
  } else if (grp.hierarchical) {  // the host's inputs to its leader, at full precision
    if (!member) stage_input(0, count);
    Round& gather = s->round();
    if (member) {
      for (int k = 0; k < nlocal; ++k)
        gather.recvs.push_back({grp.local_peers[k], w->local_in + static_cast<size_t>(k) * count * elem, count * elem});
    } else {
      gather.sends.push_back({grp.leader, full_send, count * elem});
    }
  }
  // Unless it moves few bytes (one_round below), the alltoall runs as m - 1 pairwise rounds (shift k: send to
  // g + k, receive from g - k), so that each link carries one flow at a time. On the host the owner sums and
  // recompresses once every input is in, in one pass (owner_reduce); on the device it adds each input while the
  // next one moves. Posting all shifts of a large call at once ran 1.3x slower on the test bed (TCP flows
  // fighting in the shaper).
  const int steps = std::max(1, m - 1);
  auto to = [&](int k) { return (g + k) % m; };
  auto from = [&](int k) { return (g - k + m) % m; };
  const bool exchanges = member && m > 1;
  // Shift order of the alltoall: with an even group the exchange round (shift m/2, partners sending to each
  // other) goes first, while the ranks are still in step; placed later it ran twice as long on the test bed.
  std::vector<int> shifts;
  if (m % 2 == 0) shifts.push_back(m / 2);
  for (int k = 1; k < m; ++k)
    if (m % 2 != 0 || k != m / 2) shifts.push_back(k);
  std::vector<int> inputs;  // the owner's inputs, in the order it adds them
  for (int k : shifts) inputs.push_back(from(k));
  if (member) {
    s->then(timed([work] { work->prepare(); }));
    // All blocks compressed before the first round: overlapping compression with the rounds measured no
    // faster here (4 ranks on 2 cores compete with the network stack; again with the owner step fused: 64 MiB
    // 8-bit 265-276 against 254-266 ms on 4 test-bed hosts).
    for (int k : shifts)
      if (exchanges && w->length(to(k)) > 0) s->then(timed([work, j = to(k)] { work->compress_block(j); }));
  }
  // A phase that moves few bytes runs in one round (every block at once): m - 1 rounds' latencies would cost more
  // than the flows sharing each link. The same choice on every rank (count, slices, m and the configuration are).
  const size_t largest_block = ring::chunk_size(ring::chunk_size(count, grp.local_size, 0), m, 0);
  const bool one_round =
      m > 2 && static_cast<size_t>(m - 1) * codec.compressed_bytes(largest_block) <= quantized_one_round_bytes(comm);
  const size_t first_alltoall_round = s->rounds().size();
  size_t first_allgather_round = 0, leader_spread_round = 0;
  if (one_round) {  // the alltoall, then the owners' results straight to everyone (no ring)
    s->round();
    s->round();
    Round& alltoall = s->rounds()[s->rounds().size() - 2];
    Round& allgather = s->rounds().back();
    first_allgather_round = s->rounds().size() - 1;
    if (exchanges) {
      for (int k : shifts) {
        if (own_count > 0)
          add_recv_pieces(alltoall.recvs, grp.members[from(k)], w->in[from(k)], codec.compressed_bytes(own_count));
        if (w->length(to(k)) > 0)
          add_send_pieces(alltoall.sends, grp.members[to(k)], w->block[to(k)],
                          codec.compressed_bytes(w->length(to(k))));
      }
      if (own_count > 0 && !device) {
        alltoall.after.push_back(timed([work, inputs] { work->owner_reduce(inputs); }));
      } else if (own_count > 0) {
        alltoall.during.push_back(timed([work] { work->owner_begin(); }));
        for (int k : shifts) alltoall.after.push_back(timed([work, j = from(k)] { work->owner_add(j); }));
        alltoall.after.push_back(timed([work] { work->owner_compress(); }));
      }
      for (int k = 1; k < m; ++k) {
        if (own_count > 0)
          add_send_pieces(allgather.sends, grp.members[to(k)], w->mine, codec.compressed_bytes(own_count));
        const int j = from(k);
        if (w->length(j) > 0)
          add_recv_pieces(allgather.recvs, grp.members[j], w->block[j], codec.compressed_bytes(w->length(j)));
      }
      allgather.during.push_back(timed([work, g] { work->finish(g); }));
      for (int k = 1; k < m; ++k) allgather.after.push_back(timed([work, j = from(k)] { work->finish(j); }));
    }
  } else {
    for (int r = 0; r < steps; ++r) {  // alltoall: my compressed copy of block j to its owner j
      Round& round = s->round();
      if (!exchanges) continue;
      const int k = shifts[r];
      if (own_count > 0)
        add_recv_pieces(round.recvs, grp.members[from(k)], w->in[from(k)], codec.compressed_bytes(own_count));
      if (w->length(to(k)) > 0)
        add_send_pieces(round.sends, grp.members[to(k)], w->block[to(k)], codec.compressed_bytes(w->length(to(k))));
      if (own_count == 0) continue;
      if (!device) {
        if (r + 1 == steps) round.after.push_back(timed([work, inputs] { work->owner_reduce(inputs); }));
        continue;
      }
      if (r == 0)
        round.during.push_back(timed([work] { work->owner_begin(); }));
      else
        round.during.push_back(timed([work, j = from(shifts[r - 1])] { work->owner_add(j); }));
      if (r + 1 == steps) round.after.push_back(timed([work, j = from(k)] { work->owner_add(j); }));
    }
    // Allgather of the owners' compressed results: a ring of m - 1 rounds. Block j starts at its owner; in round
    // t rank g forwards block g - t to g + 1, in messages of 512 KiB (add_send_pieces), and decompresses the block
    // it received in round t while round t + 1 moves (after the last round, the last one). The owner compresses
    // its block after the alltoall. Cutting blocks into pipelined pieces (up to 16 of 512 KiB, a round barrier
    // each) was slower: 257-308 ms against 241-262 ms for the 64 MiB 8-bit call on 4 test-bed hosts. So were
    // pairwise rounds (owner g straight to g + k, as in the alltoall): 16 MiB 8-bit 82-94 against 67-79 ms. So were
    // eager pieces (SendMode::kEager, no rendezvous handshake): 16 MiB 8-bit 72-84 against 62-66 ms, 64 MiB 4-bit
    // 168-173 against 133-144 ms, three alternated runs (flows into one receiver overlap across rounds).
    const int ring_rounds = std::max(1, m - 1);
    const size_t first_gather_round = s->rounds().size();
    first_allgather_round = first_gather_round;
    for (int t = 0; t < ring_rounds; ++t) s->round();
    auto gather_round = [&](int t) -> Round& { return s->rounds()[first_gather_round + t]; };
    // Work for the round after round t (its `during`), or after the last round.
    auto after_round = [&](int t, LocalStep step) {
      if (t + 1 < ring_rounds)
        gather_round(t + 1).during.push_back(std::move(step));
      else
        gather_round(t).after.push_back(std::move(step));
    };
    if (exchanges) {
      const int next = grp.members[to(1)], prev = grp.members[from(1)];
      if (device) s->rounds()[first_gather_round - 1].after.push_back(timed([work] { work->owner_compress(); }));
      after_round(0, timed([work, g] { work->finish(g); }));
      for (int t = 0; t < m - 1; ++t) {
        const int send_block = (g - t + m) % m, recv_block = (g - t - 1 + m) % m;
        const size_t send_bytes = codec.compressed_bytes(w->length(send_block));
        const size_t recv_bytes = codec.compressed_bytes(w->length(recv_block));
        Round& round = gather_round(t);
        if (send_bytes > 0)
          add_send_pieces(round.sends, next, send_block == g ? w->mine : w->block[send_block], send_bytes);
        if (recv_bytes > 0) add_recv_pieces(round.recvs, prev, w->block[recv_block], recv_bytes);
        after_round(t, timed([work, recv_block] { work->finish(recv_block); }));
      }
    }
  }
  if (member && !exchanges) s->then(timed([work] { work->finish(0); }));
  if (grp.rail && exchanges) {
    // This rank's slice of the result, compressed, to the host's other ranks; theirs in, and decompressed here (the
    // same bytes that their rails decompressed: identical outputs).
    Round& spread = s->round();
    for (int k = 0; k < nlocal; ++k) {
      const int peer = grp.local_peers[k];
      const size_t their_bytes = result_layout(grp, codec, count, w->peer_local_index(k))[m];
      if (their_bytes > 0) spread.recvs.push_back({peer, w->peer_result[k], their_bytes});
      if (layout[m] > 0) spread.sends.push_back({peer, base + result_at, layout[m]});
      spread.after.push_back(timed([work, k] { work->finish_peer(k); }));
    }
  } else if (grp.rail) {  // this rank's slice of the result to the host's other ranks, theirs from them
    const size_t mine = grp.slice_count(count);
    if (nlocal > 0) stage_output(grp.slice_begin(count), mine);
    Round& spread = s->round();
    for (int k = 0; k < nlocal; ++k) {
      const int peer = grp.local_peers[k];
      const int theirs = w->peer_local_index(k);
      const size_t n = grp.slice_count_of(count, theirs);
      if (n > 0) spread.recvs.push_back({peer, full_out + grp.slice_begin_of(count, theirs) * elem, n * elem});
      if (mine > 0) spread.sends.push_back({peer, full_out + grp.slice_begin(count) * elem, mine * elem});
      unstage_output(spread, grp.slice_begin_of(count, theirs), n);
    }
  } else if (grp.hierarchical) {  // the result to the host's other ranks
    if (member && nlocal > 0) stage_output(0, count);
    leader_spread_round = s->rounds().size();
    Round& spread = s->round();
    if (member) {
      for (int peer : grp.local_peers) spread.sends.push_back({peer, full_out, count * elem});
    } else {
      spread.recvs.push_back({grp.leader, full_out, count * elem});
      unstage_output(spread, 0, count);
    }
  }
  if (phased) {
    // The rounds run in segments, each sending what one phase wrote and opening the next phase's gate once it has
    // received what that phase reads: before the alltoall (rail: the exchange of input slices; leader: its host's
    // inputs in) on phase 0; the alltoall on the compression; the allgather (and the rail's spread) on the owner's
    // phase; the leader's spread on the output's phase. The last phase runs once the operation has ended.
    const bool leader = grp.hierarchical && !grp.rail;
    std::vector<std::pair<size_t, size_t>> segments;  // [first round, end) by phase; none is empty
    if (grp.hierarchical) segments.emplace_back(0, first_alltoall_round);
    segments.emplace_back(first_alltoall_round, first_allgather_round);
    segments.emplace_back(first_allgather_round, leader ? leader_spread_round : s->rounds().size());
    if (leader) segments.emplace_back(leader_spread_round, s->rounds().size());
    for (size_t p = 0; p < segments.size(); ++p) {
      const auto [begin, end] = segments[p];
      for (size_t r = begin; r < end; ++r) s->rounds()[r].ready = [device, p] { return device->phase_done(p); };
      if (end > begin && p + 1 < segments.size())  // (the last segment's next phase follows the call's gate)
        s->rounds()[end - 1].after.push_back(call_step([device, p] { device->open_phase(p + 1); }));
    }
    enqueue_phases(w, shifts, own_count);
    device->proxy().count_compressed_on_device();
  } else if (device) {
    // What a round sends was compressed by kernels issued before it: post it once they have finished.
    for (Round& round : s->rounds())
      if (!round.sends.empty()) round.ready = [device] { return device->work_done(); };
    device->proxy().count_compressed_on_device();
  }
  auto op = std::make_unique<ScheduleOp>(BAGUA_OPKIND_QUANTIZED_ALLREDUCE, std::move(description), std::move(s));
  op->set_algorithm("quantized_allreduce", form);
  return op;
}

}  // namespace bagua

// extern "C" entry points of the quantized allreduce and its state.
#include <memory>
#include <thread>

#include "algorithms/dispatch.h"
#include "algorithms/quantized/codec.h"
#include "algorithms/quantized/quantized_allreduce.h"
#include "api/api_guard.h"
#include "api/op_helpers.h"
#include "base/logging.h"
#include "kernels/device_runtime.h"
#include "kernels/dtype.h"

struct bagua_qstate {
  bagua_comm* comm = nullptr;
  std::unique_ptr<bagua::QuantizedState> impl;
};

namespace bagua {
namespace {

// Counts a device call against its state until the call's operation is freed (destroy waits for none); on_stream:
// a call that compresses on `stream` (of `device`), its caller's.
std::shared_ptr<void> queued_on(QuantizedState* state, bool on_stream = false, void* stream = nullptr,
                                int device = -1) {
  if (state == nullptr) return nullptr;
  if (!on_stream) {
    state->queued++;
    return std::shared_ptr<void>(nullptr, [state](void*) { state->queued--; });
  }
  state->queued_stream = stream;
  state->queued_device = device;
  state->queued_thread = std::this_thread::get_id();
  state->queued_on_stream++;
  state->queued++;
  return std::shared_ptr<void>(nullptr, [state](void*) {
    state->queued--;
    state->queued_on_stream--;
  });
}

// Whether a call on `stream` of `device` is ordered after the state's queued calls: the same stream (either handle
// of the legacy default stream; the per-thread default stream of the same thread) of the same device.
bool ordered_after_queued(const QuantizedState& state, void* stream, int device) {
  if (state.queued_device != device) return false;
  if (is_legacy(stream)) return is_legacy(state.queued_stream);
  if (is_per_thread(stream))
    return is_per_thread(state.queued_stream) && state.queued_thread == std::this_thread::get_id();
  return stream == state.queued_stream;
}

void check_float_dtype(bagua_datatype_t dtype) {
  check_dtype_in(dtype, {BAGUA_FLOAT32, BAGUA_FLOAT16, BAGUA_BFLOAT16}, "quantized allreduce");
}

std::unique_ptr<Operation> make_quantized(bagua_comm* handle, const void* sendbuf, void* recvbuf, size_t count,
                                          bagua_datatype_t dtype, bagua_redop_t op, const bagua_compression_t* cfg,
                                          bagua_qstate* state, void* stream, bool request) {
  Comm& comm = require_comm(handle);
  Codec codec = Codec::from_config(cfg);
  check_float_dtype(dtype);
  if (op != BAGUA_SUM && op != BAGUA_AVG) {
    check_redop(op);
    fail(BAGUA_ERR_INVALID_ARGUMENT, "quantized allreduce takes BAGUA_SUM or BAGUA_AVG");
  }
  RelaxationBuffers buffers = check_relaxation_buffers(comm, sendbuf, recvbuf, count, dtype);
  if (state == nullptr && codec.error_feedback())
    fail(BAGUA_ERR_INVALID_ARGUMENT, "error feedback needs a state from bagua_qstate_create");
  if (state != nullptr) {
    if (state->comm != handle) fail(BAGUA_ERR_INVALID_ARGUMENT, "state was created for another communicator");
    state->impl->check_matches(comm, count, dtype, codec, !buffers.on_device);
  }
  comm.check_usable();
  QuantizedState* impl = state ? state->impl.get() : nullptr;
  if (buffers.on_device) {
    // The operation is built on the device proxy's thread, where a call below the full-precision size picks an
    // allreduce algorithm: make the communicator's selector here, on the caller's thread, so that it only reads.
    selector_of(comm);
    const QuantizedArgs args{sendbuf, recvbuf, count, dtype, op};
    const bool on_stream = comm.config().device_path_on_stream;
    // Compressing on the device needs more memory than staging the buffers (fp32 copies of fp16/bf16 inputs; the
    // host's inputs): where that passes the limit or the device has not got it, the call is staged (nothing is taken
    // or counted before the sequence number, so falling back has no side effect). On the caller's stream
    // (BAGUA_DEVICE_DATA_PATH=stream) only a blocking call outside a group of a group member does (every form), on
    // the stream's own device, and with a state only while no call that compresses on the host has it.
    const QuantizedDeviceMemory memory = quantized_device_memory(comm, args, codec);
    // (each lease is rounded up to 256 bytes; a timed call's timestamps follow its staging, 8-byte aligned)
    const size_t rounding = 512 + (on_stream && comm.config().device_timing ? 8 + DeviceOperation::kTimestampBytes : 0);
    bool compute = compresses_on_device(comm, args, impl) &&
                   memory.staging + memory.device + rounding <= comm.config().device_memory_limit;
    if (compute && on_stream) {
      compute = !request && compresses_on_caller_stream(comm, codec, impl) &&
                device_runtime().stream_device(stream) == buffers.device && !in_open_group() &&
                (impl == nullptr || (!impl->busy && impl->queued <= impl->queued_on_stream));
      if (compute && impl && impl->queued_on_stream > 0 && !ordered_after_queued(*impl, stream, buffers.device))
        fail(BAGUA_ERR_INVALID_USAGE,
             "the qstate has calls queued on another stream (order a state's calls on one stream)");
    }
    if (compute) {
      try {
        if (impl && on_stream)
          impl->residual_to_device(buffers.device);  // (its calls in flight are on this stream: ordered)
        else if (impl && impl->queued == 0 && !impl->busy)
          impl->reserve_device(buffers.device);
        return make_device_computed_relaxation(
            comm, BAGUA_OPKIND_QUANTIZED_ALLREDUCE, buffers, stream, memory.staging, memory.device, on_stream,
            TagKind::kQuantized, dtype, op, quantized_details(count, codec), "quantized_allreduce",
            [&comm, args, codec, impl, on_stream, in_queue = queued_on(impl, on_stream, stream, buffers.device)](
                DeviceOperation& device, const ScheduleContext& ctx) {
              if (impl && impl->busy && !on_stream)
                fail(BAGUA_ERR_INVALID_USAGE,
                     "the qstate is in use by an earlier call that has not finished "
                     "(order a state's calls on one stream)");
              return build_quantized_allreduce(comm, args, codec, impl, &ctx, &device);
            });
      } catch (const Error& e) {
        // (a state with calls queued on the stream keeps its error feedback there: no staged call can take it)
        if (e.status() != BAGUA_ERR_SYSTEM || (impl && on_stream && impl->queued_on_stream > 0)) throw;
        BAGUA_DEBUG("quantized allreduce staged: {}", e.what());
      }
    }
    if (impl && on_stream) {  // staged: the host's error feedback, moved here by the calling thread
      if (impl->queued_on_stream > 0)
        fail(BAGUA_ERR_INVALID_USAGE,
             "the qstate's error feedback is in device memory, in use by calls queued on a stream; synchronize that "
             "stream before a call that compresses on the host (a request, or one over the device memory limit)");
      impl->residual_to_host();
    }
    return make_device_relaxation(
        comm, BAGUA_OPKIND_QUANTIZED_ALLREDUCE, buffers, stream, TagKind::kQuantized, dtype, op,
        quantized_details(count, codec), "quantized_allreduce",
        [&comm, count, dtype, op, codec, impl, in_queue = queued_on(impl)](const void* send, void* recv,
                                                                           const ScheduleContext& ctx) {
          if (impl && impl->busy)
            fail(BAGUA_ERR_INVALID_USAGE,
                 "the qstate is in use by an earlier call that has not finished "
                 "(order a state's calls on one stream)");
          return build_quantized_allreduce(comm, QuantizedArgs{send, recv, count, dtype, op}, codec, impl, &ctx);
        });
  }
  return build_quantized_allreduce(comm, QuantizedArgs{sendbuf, recvbuf, count, dtype, op}, codec, impl);
}

}  // namespace
}  // namespace bagua

using namespace bagua;

extern "C" {

bagua_status_t bagua_qstate_create(bagua_comm_t comm, size_t count, bagua_datatype_t dtype,
                                   const bagua_compression_t* cfg, bagua_qstate_t* state) {
  return guarded(comm, "bagua_qstate_create", [&] {
    Comm& c = require_comm(comm);
    require_pointer(state, "state");
    Codec codec = Codec::from_config(cfg);
    check_float_dtype(dtype);
    checked_bytes(count, dtype, "count");
    if (codec.error_feedback()) checked_bytes(count, BAGUA_FLOAT32, "count (error feedback is kept in float32)");
    auto made = std::make_unique<bagua_qstate>();
    made->comm = comm;
    made->impl = std::make_unique<QuantizedState>(c, count, dtype, codec);
    *state = made.release();
  });
}

bagua_status_t bagua_qstate_destroy(bagua_qstate_t state) {
  return guarded(nullptr, "bagua_qstate_destroy", [&] {
    require_pointer(state, "state");
    if (state->impl->busy || state->impl->queued > 0)
      fail(BAGUA_ERR_INVALID_USAGE, "state is in use by an operation that has not completed");
    delete state;
  });
}

bagua_status_t bagua_qstate_residual(bagua_qstate_t state, float* residual, size_t count) {
  return guarded(nullptr, "bagua_qstate_residual", [&] {
    require_pointer(state, "state");
    require_pointer(residual, "residual");
    if (count != state->impl->count())
      fail(BAGUA_ERR_INVALID_ARGUMENT, "count {} differs from the state's {}", count, state->impl->count());
    if (state->impl->busy || state->impl->queued > 0)
      fail(BAGUA_ERR_INVALID_USAGE, "state is in use by an operation that has not completed");
    state->impl->residual_to_host();
    state->impl->residual(residual);
  });
}

bagua_status_t bagua_quantized_allreduce(const void* sendbuf, void* recvbuf, size_t count, bagua_datatype_t dtype,
                                         bagua_redop_t op, const bagua_compression_t* cfg, bagua_qstate_t state,
                                         bagua_comm_t comm, void* stream) {
  return guarded(comm, "bagua_quantized_allreduce", [&] {
    run_blocking(comm, make_quantized(comm, sendbuf, recvbuf, count, dtype, op, cfg, state, stream, false));
  });
}

bagua_status_t bagua_iquantized_allreduce(const void* sendbuf, void* recvbuf, size_t count, bagua_datatype_t dtype,
                                          bagua_redop_t op, const bagua_compression_t* cfg, bagua_qstate_t state,
                                          bagua_comm_t comm, bagua_request_t* req) {
  return guarded(comm, "bagua_iquantized_allreduce", [&] {
    require_comm(comm);
    require_pointer(req, "req");
    post_request(comm, make_quantized(comm, sendbuf, recvbuf, count, dtype, op, cfg, state, nullptr, true), req);
  });
}

}  // extern "C"

// extern "C" entry points of the bucket scheduler (algorithms/scheduler).
#include <memory>
#include <string>
#include <vector>

#include "algorithms/quantized/codec.h"
#include "algorithms/scheduler/bucket_scheduler.h"
#include "api/api_guard.h"
#include "kernels/dtype.h"

// The scheduler runs on its own split and may outlive the communicator it was made from, so its calls record their
// errors as the thread's (bagua_get_last_error(NULL)), never on that communicator.
struct bagua_scheduler {
  bagua::SchedulerConfig config;
  std::unique_ptr<bagua::BucketScheduler> impl;
};

namespace bagua {
namespace {

SchedulerConfig scheduler_config_of(const bagua_scheduler_config_t* in) {
  require_pointer(in, "config");
  if (in->size < sizeof(bagua_scheduler_config_t) || in->size > (1u << 20))
    fail(BAGUA_ERR_INVALID_ARGUMENT, "config->size {} is not a bagua_scheduler_config_t size (this version has {})",
         in->size, sizeof(bagua_scheduler_config_t));
  if (in->magic != BAGUA_SCHEDULER_MAGIC)
    fail(BAGUA_ERR_INVALID_ARGUMENT,
         "config->magic is {:#x}, not BAGUA_SCHEDULER_MAGIC: start from BAGUA_SCHEDULER_CONFIG_INITIALIZER", in->magic);
  SchedulerConfig out;
  if (in->algorithm < BAGUA_BUCKET_ALLREDUCE || in->algorithm > BAGUA_BUCKET_LOW_PRECISION_DECENTRALIZED)
    fail(BAGUA_ERR_INVALID_ARGUMENT, "config->algorithm {} is not a bagua_bucket_algorithm_t", in->algorithm);
  out.algorithm = static_cast<bagua_bucket_algorithm_t>(in->algorithm);
  if (in->op != BAGUA_SUM && in->op != BAGUA_AVG)
    fail(BAGUA_ERR_INVALID_ARGUMENT, "config->op {} must be BAGUA_SUM or BAGUA_AVG", in->op);
  out.op = static_cast<bagua_redop_t>(in->op);
  bagua_compression_t compression = BAGUA_COMPRESSION_INITIALIZER;
  if (in->compression != nullptr) {
    Codec::from_config(in->compression);  // checks size, magic and fields
    compression = *in->compression;
    compression.size = sizeof(bagua_compression_t);
  }
  if (out.algorithm == BAGUA_BUCKET_ONEBIT) {  // sign compression with error feedback, whatever `compression` says
    compression.kind = BAGUA_COMPRESS_SIGN;
    compression.error_feedback = 1;
    compression.stochastic = 0;
  }
  Codec::from_config(&compression);
  out.compression = compression;
  out.bucket_bytes = in->bucket_bytes ? in->bucket_bytes : size_t{4} << 20;
  if (in->autotune != 0 && in->autotune != 1)
    fail(BAGUA_ERR_INVALID_ARGUMENT, "config->autotune {} must be 0 or 1", in->autotune);
  out.autotune = in->autotune == 1;
  if (in->hierarchical < BAGUA_HIERARCHICAL_AUTO || in->hierarchical > BAGUA_HIERARCHICAL_OFF)
    fail(BAGUA_ERR_INVALID_ARGUMENT, "config->hierarchical {} is not a bagua_hierarchical_t", in->hierarchical);
  out.hierarchical = static_cast<bagua_hierarchical_t>(in->hierarchical);
  if (in->topology < BAGUA_TOPO_RING || in->topology > BAGUA_TOPO_FULL)
    fail(BAGUA_ERR_INVALID_ARGUMENT, "config->topology {} is not a bagua_topology_kind_t", in->topology);
  out.topology = static_cast<bagua_topology_kind_t>(in->topology);
  if (in->warmup_steps < 0) fail(BAGUA_ERR_INVALID_ARGUMENT, "config->warmup_steps {} is negative", in->warmup_steps);
  out.warmup_steps = in->warmup_steps;
  if (!(in->beta1 >= 0.0f && in->beta1 < 1.0f))
    fail(BAGUA_ERR_INVALID_ARGUMENT, "config->beta1 {} is outside [0, 1)", in->beta1);
  out.beta1 = in->beta1;
  return out;
}

void check_scheduler_dtype(const SchedulerConfig& config, bagua_datatype_t dtype, int tensor) {
  auto allowed = [&](std::initializer_list<bagua_datatype_t> list, const char* algorithm) {
    for (bagua_datatype_t d : list)
      if (d == dtype) return;
    fail(BAGUA_ERR_INVALID_ARGUMENT, "tensor {}: {} does not take {}", tensor, algorithm, datatype_name(dtype));
  };
  switch (config.algorithm) {
    case BAGUA_BUCKET_ALLREDUCE: return;
    case BAGUA_BUCKET_QUANTIZED:
    case BAGUA_BUCKET_ONEBIT: return allowed({BAGUA_FLOAT32, BAGUA_FLOAT16, BAGUA_BFLOAT16}, "a compressed algorithm");
    case BAGUA_BUCKET_QADAM: return allowed({BAGUA_FLOAT32}, "QADAM");
    case BAGUA_BUCKET_DECENTRALIZED: return allowed({BAGUA_FLOAT32, BAGUA_FLOAT64}, "DECENTRALIZED");
    case BAGUA_BUCKET_LOW_PRECISION_DECENTRALIZED: return allowed({BAGUA_FLOAT32}, "LOW_PRECISION_DECENTRALIZED");
  }
}

}  // namespace
}  // namespace bagua

using namespace bagua;

extern "C" {

bagua_status_t bagua_scheduler_create(bagua_comm_t comm, const bagua_scheduler_config_t* config,
                                      bagua_scheduler_t* sched) {
  return guarded(comm, "bagua_scheduler_create", [&] {
    Comm& c = require_comm(comm);
    require_pointer(sched, "sched");
    SchedulerConfig checked = scheduler_config_of(config);
    // Flat it pairs ranks. Hierarchical it pairs hosts, and is not chosen for an odd number of them
    // (hierarchy_applies); an even number of equal hosts has an even number of ranks.
    if (checked.algorithm == BAGUA_BUCKET_DECENTRALIZED && checked.topology == BAGUA_TOPO_SHIFT_ONE && c.size() % 2)
      fail(BAGUA_ERR_INVALID_ARGUMENT,
           "config->topology BAGUA_TOPO_SHIFT_ONE pairs ranks: DECENTRALIZED on it needs an even number of ranks, "
           "not {}",
           c.size());
    c.check_usable();
    std::unique_ptr<Comm> own = c.split(0, c.rank());  // collective on comm: the scheduler's thread's own
    c.link_for_abort(*own);                            // bagua_comm_abort(comm) reaches the scheduler too
    auto made = std::make_unique<bagua_scheduler>();
    made->config = checked;
    made->impl = std::make_unique<BucketScheduler>(std::move(own), checked);
    *sched = made.release();
  });
}

bagua_status_t bagua_scheduler_register(bagua_scheduler_t sched, int ntensors, void* const* tensors,
                                        const size_t* counts, const bagua_datatype_t* dtypes) {
  return guarded(nullptr, "bagua_scheduler_register", [&] {
    require_pointer(sched, "sched");
    if (ntensors < 1) fail(BAGUA_ERR_INVALID_ARGUMENT, "ntensors {} must be at least 1", ntensors);
    require_pointer(tensors, "tensors");
    require_pointer(counts, "counts");
    require_pointer(dtypes, "dtypes");
    std::vector<void*> pointers(tensors, tensors + ntensors);
    std::vector<TensorSpec> specs(ntensors);
    CallMemory memory;                         // all host, or all device memory of one device
    std::vector<std::string> names(ntensors);  // CallMemory keeps the first name
    for (int i = 0; i < ntensors; ++i) {
      check_dtype_in(dtypes[i],
                     {BAGUA_INT8, BAGUA_UINT8, BAGUA_INT32, BAGUA_UINT32, BAGUA_INT64, BAGUA_UINT64, BAGUA_FLOAT16,
                      BAGUA_BFLOAT16, BAGUA_FLOAT32, BAGUA_FLOAT64},
                     "a scheduler tensor");
      names[i] = fmt::format("tensors[{}]", i);
      size_t bytes = checked_bytes(counts[i], dtypes[i], "counts[i]");
      memory.add(pointers[i], bytes, names[i].c_str());
      check_scheduler_dtype(sched->config, dtypes[i], i);
      specs[i].count = counts[i];
      specs[i].dtype = dtypes[i];
    }
    sched->impl->register_tensors(pointers, specs, memory.on_device() ? memory.device() : -1);
  });
}

bagua_status_t bagua_scheduler_mark_ready(bagua_scheduler_t sched, int tensor, void* event) {
  return guarded(nullptr, "bagua_scheduler_mark_ready", [&] {
    require_pointer(sched, "sched");
    sched->impl->mark_ready(tensor, event);
  });
}

bagua_status_t bagua_scheduler_mark_unused(bagua_scheduler_t sched, int tensor) {
  return guarded(nullptr, "bagua_scheduler_mark_unused", [&] {
    require_pointer(sched, "sched");
    sched->impl->mark_unused(tensor);
  });
}

bagua_status_t bagua_scheduler_skip_step(bagua_scheduler_t sched) {
  return guarded(nullptr, "bagua_scheduler_skip_step", [&] {
    require_pointer(sched, "sched");
    sched->impl->skip_step();
  });
}

bagua_status_t bagua_scheduler_wait(bagua_scheduler_t sched, void* stream) {
  return guarded(nullptr, "bagua_scheduler_wait", [&] {
    require_pointer(sched, "sched");
    sched->impl->wait(stream);
  });
}

bagua_status_t bagua_scheduler_set_bucket_bytes(bagua_scheduler_t sched, size_t bucket_bytes) {
  return guarded(nullptr, "bagua_scheduler_set_bucket_bytes", [&] {
    require_pointer(sched, "sched");
    sched->impl->set_bucket_bytes(bucket_bytes);
  });
}

bagua_status_t bagua_scheduler_get_info(bagua_scheduler_t sched, bagua_scheduler_info_t* info) {
  return guarded(nullptr, "bagua_scheduler_get_info", [&] {
    require_pointer(sched, "sched");
    require_pointer(info, "info");
    if (info->size < sizeof(bagua_scheduler_info_t))
      fail(BAGUA_ERR_INVALID_ARGUMENT, "info->size {} is not sizeof(bagua_scheduler_info_t) ({})", info->size,
           sizeof(bagua_scheduler_info_t));
    SchedulerInfo i = sched->impl->info();
    info->steps = i.steps;
    info->bucket_bytes = i.bucket_bytes;
    info->buckets = i.buckets;
    info->hierarchical = i.hierarchical;
    info->tuning = i.tuning;
    info->settled = i.settled;
    info->decisions = i.decisions;
    info->step_ms = i.step_ms;
    info->bytes_sent = i.bytes_sent;
  });
}

bagua_status_t bagua_scheduler_residual(bagua_scheduler_t sched, int tensor, float* residual, size_t count) {
  return guarded(nullptr, "bagua_scheduler_residual", [&] {
    require_pointer(sched, "sched");
    require_pointer(residual, "residual");
    sched->impl->residual(tensor, residual, count);
  });
}

bagua_status_t bagua_scheduler_destroy(bagua_scheduler_t sched) {
  return guarded(nullptr, "bagua_scheduler_destroy", [&] {
    require_pointer(sched, "sched");
    if (sched->impl->step_in_flight())
      fail(BAGUA_ERR_INVALID_USAGE, "a step is in flight (tensors marked, wait not called): wait for it first");
    delete sched;
  });
}

}  // extern "C"

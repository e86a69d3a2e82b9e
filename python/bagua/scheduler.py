"""The bucket scheduler (bagua_scheduler_*, docs/scheduler.md): register tensors once, mark each ready from the
backward hooks in any order, wait at the end of the step."""

import ctypes
import enum

from ._args import SIZE_RANGE, _int
from ._buffers import DataType, as_buffer
from ._library import SCHEDULER_MAGIC, VERSION_CODE, SchedulerConfig, SchedulerInfo, c_handle, call
from .errors import InvalidArgumentError, InvalidUsageError
from .relaxations import Hierarchical, TopologyKind, _enum


class BucketAlgorithm(enum.IntEnum):
    """bagua_bucket_algorithm_t."""

    ALLREDUCE = 0
    QUANTIZED = 1
    ONEBIT = 2
    QADAM = 3
    DECENTRALIZED = 4
    LOW_PRECISION_DECENTRALIZED = 5


class Scheduler:
    """Collective: a scheduler on its own split of comm, with its own thread."""

    def __init__(self, comm, algorithm=BucketAlgorithm.ALLREDUCE, op=4, compression=None, bucket_bytes=0,
                 autotune=True, hierarchical=Hierarchical.AUTO, topology=TopologyKind.ONE_PEER_EXPONENTIAL,
                 warmup_steps=100, beta1=0.9):
        self.comm = comm
        self._compression = compression.as_struct() if compression is not None else None
        config = SchedulerConfig(
            ctypes.sizeof(SchedulerConfig), SCHEDULER_MAGIC, VERSION_CODE,
            int(_enum(BucketAlgorithm, algorithm, "algorithm")), int(op),
            ctypes.pointer(self._compression) if self._compression is not None else None,
            _int(bucket_bytes, "bucket_bytes", SIZE_RANGE),
            int(bool(autotune)), int(_enum(Hierarchical, hierarchical, "hierarchical")),
            int(_enum(TopologyKind, topology, "topology")), _int(warmup_steps, "warmup_steps"), float(beta1))
        self._handle = c_handle()
        call("scheduler_create", comm._h(), ctypes.byref(config), ctypes.byref(self._handle))
        self._tensors = None
        comm._active.add(self)

    def _h(self):
        if self._handle is None:
            raise InvalidUsageError("this Scheduler was closed")
        return self._handle

    def register(self, tensors):
        """Collective, once: the tensors in the order buckets should go. They must stay where they are."""
        if self._tensors is not None:
            raise InvalidUsageError("register: the scheduler's tensors are registered already")
        bufs = [as_buffer(t, f"tensors[{i}]", True) for i, t in enumerate(tensors)]
        if not bufs:
            raise InvalidArgumentError("register: no tensors")
        n = len(bufs)
        ptrs = (ctypes.c_void_p * n)(*[b.ptr for b in bufs])
        counts = (ctypes.c_size_t * n)(*[b.count for b in bufs])
        dtypes = (ctypes.c_int * n)(*[int(b.dtype) for b in bufs])
        call("scheduler_register", self._h(), n, ptrs, counts, dtypes)
        self._tensors = bufs  # keeps the tensors alive

    def mark_ready(self, tensor, event=None):
        """Tensor is ready for this step (event: a cudaEvent_t handle to wait on for device tensors; a
        torch.cuda.Event's handle is its cuda_event)."""
        if event is not None and not isinstance(event, int):
            event = getattr(event, "cuda_event", event)  # a torch.cuda.Event
            if not isinstance(event, int):
                raise InvalidArgumentError(f"event must be a cudaEvent_t handle (an int), not {type(event).__name__}")
        call("scheduler_mark_ready", self._h(), _int(tensor, "tensor"), event)

    def mark_unused(self, tensor):
        call("scheduler_mark_unused", self._h(), _int(tensor, "tensor"))

    def skip_step(self):
        call("scheduler_skip_step", self._h())

    def wait(self, stream=None):
        call("scheduler_wait", self._h(), getattr(stream, "cuda_stream", stream))

    def set_bucket_bytes(self, bucket_bytes):
        call("scheduler_set_bucket_bytes", self._h(), _int(bucket_bytes, "bucket_bytes", SIZE_RANGE))

    def info(self):
        info = SchedulerInfo()
        info.size = ctypes.sizeof(SchedulerInfo)
        call("scheduler_get_info", self._h(), ctypes.byref(info))
        return {name: getattr(info, name) for name, _ in SchedulerInfo._fields_ if name != "size"}

    def residual(self, tensor, out):
        """The error-feedback residual of tensor, into out (float32 of the tensor's length)."""
        buf = as_buffer(out, "out", True)
        if buf.is_cuda or buf.dtype != DataType.FLOAT32:
            raise InvalidArgumentError("residual: out must be float32 in host memory")
        call("scheduler_residual", self._h(), _int(tensor, "tensor"), buf.ptr, buf.count)
        return out

    def close(self):
        if self._handle is not None:
            call("scheduler_destroy", self._handle)  # refused while a step is in flight: nothing changes then
            self._handle = None
            self._tensors = None
            self.comm._active.discard(self)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

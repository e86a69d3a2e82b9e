"""BAGUA's system relaxations: compression settings, quantized-allreduce state, gossip topologies,
low-precision decentralized SGD and asynchronous model averaging (docs/relaxations.md)."""

import array
import contextlib
import ctypes
import dataclasses
import enum
import threading

from ._args import SIZE_RANGE, _int
from ._buffers import DataType, as_buffer
from ._library import COMPRESSION_MAGIC, VERSION_CODE, c_handle, call
from .errors import InvalidArgumentError, InvalidUsageError


class CompressKind(enum.IntEnum):
    """bagua_compress_kind_t."""

    MINMAX = 0
    SIGN = 1
    FP16 = 2
    BF16 = 3


class Hierarchical(enum.IntEnum):
    """bagua_hierarchical_t."""

    AUTO = 0
    ON = 1
    OFF = 2


class TopologyKind(enum.IntEnum):
    """bagua_topology_kind_t."""

    RING = 0
    EXPONENTIAL = 1
    ONE_PEER_EXPONENTIAL = 2
    SHIFT_ONE = 3
    FULL = 4


def _enum(cls, value, what):
    if isinstance(value, str):
        try:
            return cls[value.upper()]
        except KeyError:
            raise InvalidArgumentError(f"{what} {value!r} is none of {', '.join(m.name.lower() for m in cls)}")
    try:
        return cls(value)
    except ValueError:
        raise InvalidArgumentError(f"{what} {value!r} is none of {', '.join(m.name.lower() for m in cls)}")


@dataclasses.dataclass(frozen=True)
class Compression:
    """bagua_compression_t. kind: 'minmax' (bits 1, 2, 4, 8), 'sign', 'fp16' or 'bf16'; chunk 256..4096."""

    kind: object = CompressKind.MINMAX
    bits: int = 8
    chunk: int = 1024
    stochastic: bool = False
    seed: int = 0
    error_feedback: bool = False
    hierarchical: object = Hierarchical.AUTO

    def as_struct(self):
        from ._library import Compression as Struct

        return Struct(ctypes.sizeof(Struct), COMPRESSION_MAGIC, VERSION_CODE,
                      int(_enum(CompressKind, self.kind, "compression kind")), int(self.bits), int(self.chunk),
                      int(bool(self.stochastic)), int(self.seed) & (2**64 - 1), int(bool(self.error_feedback)),
                      int(_enum(Hierarchical, self.hierarchical, "hierarchical")))


class _Handle:
    """A library object freed by close() (or the context manager's exit)."""

    _destroy = None

    def __init__(self, comm, handle):
        self.comm = comm  # keeps the communicator alive
        self._handle = handle
        comm._dependents.add(self)

    def _h(self):
        if self._handle is None:
            raise InvalidUsageError(f"this {type(self).__name__} was closed")
        return self._handle

    def close(self):
        if self._handle is not None:
            call(self._destroy, self._handle)  # a refusal leaves the object as it was
            self._handle = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class QState(_Handle):
    """Error-feedback buffers and step counter of one tensor for quantized_allreduce (local, not collective)."""

    _destroy = "qstate_destroy"

    def __init__(self, comm, count, dtype=DataType.FLOAT32, compression=None):
        self.compression = compression or Compression(error_feedback=True)
        self.count = _int(count, "count", SIZE_RANGE)
        cfg = self.compression.as_struct()
        handle = c_handle()
        call("qstate_create", comm._h(), self.count, int(dtype), ctypes.byref(cfg), ctypes.byref(handle))
        super().__init__(comm, handle)

    def residual(self, out=None):
        """What error feedback still owes, as count float32 (into out, else a new array.array('f'))."""
        if out is None:
            out = array.array("f", bytes(4 * self.count))
        buf = _float32(out, "out", self.count, host=True)
        call("qstate_residual", self._h(), buf.ptr, buf.count)
        return out

    def __del__(self):
        if getattr(self, "_handle", None) is not None:
            self.close()


class Topology(_Handle):
    """A gossip graph (local: every rank computes the same one). kind: a TopologyKind or its name."""

    _destroy = "topology_destroy"

    def __init__(self, comm, kind=TopologyKind.RING, _handle=None):
        if _handle is None:
            _handle = c_handle()
            call("topology_create", comm._h(), int(_enum(TopologyKind, kind, "topology kind")),
                 ctypes.byref(_handle))
        super().__init__(comm, _handle)

    @classmethod
    def from_edges(cls, comm, src, dst, weights=None, metropolis_hastings=False):
        """A static graph: edge e sends src[e]'s vector to dst[e] with weights[e]."""
        if len(src) != len(dst) or (weights is not None and len(weights) != len(src)):
            raise InvalidArgumentError("from_edges: src, dst and weights must have one entry per edge")
        n = len(src)
        c_src = (ctypes.c_int * n)(*[_int(v, "src") for v in src])
        c_dst = (ctypes.c_int * n)(*[_int(v, "dst") for v in dst])
        try:
            c_weights = None if weights is None else (ctypes.c_double * n)(*[float(w) for w in weights])
        except (TypeError, ValueError):
            raise InvalidArgumentError("from_edges: weights must be numbers") from None
        handle = c_handle()
        call("topology_create_from_edges", comm._h(), n, c_src, c_dst, c_weights, int(bool(metropolis_hastings)),
             ctypes.byref(handle))
        return cls(comm, _handle=handle)

    def check(self):
        """Collective: raises InvalidUsageError unless every rank holds the same topology."""
        call("topology_check", self._h())

    def set_hierarchical(self, hierarchical=True):
        call("topology_set_hierarchical", self._h(), int(bool(hierarchical)))

    def __del__(self):
        if getattr(self, "_handle", None) is not None:
            self.close()


def _float32(buf, what, count=None, writable=True, host=False):
    b = as_buffer(buf, what, writable)
    if host and b.is_cuda:
        raise InvalidArgumentError(f"{what} must be in host memory")
    if b.dtype != DataType.FLOAT32:
        raise InvalidArgumentError(f"{what} must be float32, not {b.dtype.name.lower()}")
    if count is not None and b.count != count:
        raise InvalidArgumentError(f"{what} has {b.count} elements, not {count}")
    return b


class LowPrecisionDecentralized(_Handle):
    """BAGUA's low-precision decentralized SGD on a ring (bagua_lpdec_*): float32 weights, replicas of this
    rank and both neighbours, compressed differences exchanged."""

    _destroy = "lpdec_destroy"

    def __init__(self, comm, initial, compression=None):
        init = _float32(initial, "initial", writable=False)
        self.count = init.count
        self.compression = compression or Compression()
        cfg = self.compression.as_struct()
        handle = c_handle()
        _finish_current_stream(init)
        call("lpdec_create", comm._h(), init.count, ctypes.byref(cfg), init.ptr, ctypes.byref(handle))
        super().__init__(comm, handle)

    def step(self, x):
        """Collective: x (the updated weights) <- replica average, and the change goes out compressed."""
        b = _float32(x, "x", self.count)
        _finish_current_stream(b)
        call("lpdec_step", self._h(), b.ptr)
        return x

    def replica(self, which, out=None):
        """which: -1 the left neighbour's replica, 0 this rank's, +1 the right neighbour's."""
        if out is None:
            out = array.array("f", bytes(4 * self.count))
        b = _float32(out, "out", self.count, host=True)
        call("lpdec_replica", self._h(), _int(which, "which"), b.ptr, b.count)
        return out


def _finish_current_stream(buf):
    """For a CUDA buffer: wait for torch's current stream on its device. The lpdec calls and the averaging thread
    order only after the legacy default stream (the C API), and the current stream may be another one."""
    if buf.is_cuda and buf.device is not None:
        import torch

        torch.cuda.current_stream(buf.device).synchronize()


class AsyncAverage:
    """Asynchronous model averaging of buf by a background thread (collective start and stop). Guard your
    updates of buf with `with avg.locked():`."""

    def __init__(self, comm, buf, interval_ms=0):
        self.comm = comm
        self._buf = as_buffer(buf, "buf", True)  # referenced until stop
        self._handle = c_handle()
        self._holder = None  # the thread that holds the lock
        self._holder_lock = threading.Lock()  # orders the updates of _holder with the library's lock and unlock
        _finish_current_stream(self._buf)  # the averaging thread reads buf at once, on its own stream
        call("async_average_start", comm._h(), self._buf.ptr, self._buf.count, int(self._buf.dtype),
             _int(interval_ms, "interval_ms"), ctypes.byref(self._handle))
        comm._active.add(self)

    def _h(self):
        if self._handle is None:
            raise InvalidUsageError("this AsyncAverage was stopped")
        return self._handle

    def lock(self):
        call("async_average_lock", self._h())
        with self._holder_lock:
            self._holder = threading.get_ident()

    def unlock(self):
        h = self._h()
        _finish_current_stream(self._buf)  # the averaging thread reads buf once unlocked
        with self._holder_lock:  # (a thread that locks meanwhile records itself after this)
            call("async_average_unlock", h)  # refused when this thread does not hold the lock: _holder stays
            self._holder = None

    @contextlib.contextmanager
    def locked(self):
        self.lock()
        try:
            yield
        finally:
            self.unlock()

    @property
    def rounds(self):
        value = ctypes.c_uint64()
        call("async_average_stats", self._h(), ctypes.byref(value))
        return value.value

    def stop(self):
        """Collective by agreement: ends averaging on every rank and frees the handle (also when it raises because
        the averaging thread failed). Refused while this thread holds the lock; the handle stays valid then."""
        if self._handle is None:
            return
        if self._holder == threading.get_ident():
            raise InvalidUsageError("stop while holding the averaging lock would wait forever: unlock first")
        try:
            call("async_average_stop", self._handle)
        finally:
            self._handle = None
            self._buf = None
            self.comm._active.discard(self)

    close = stop

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()

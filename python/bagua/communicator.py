"""The communicator and its operations, over the C API (include/bagua/bagua.h).

Buffers are torch tensors (CPU, or CUDA on the current stream), NumPy arrays or any buffer-protocol object.
Outputs are written in place into the buffers given, and the call returns the output object.
Each operation has a non-blocking form, named with a leading i, that returns a Request.
"""

import contextlib
import ctypes
import enum
import threading
import weakref

from . import _buffers
from ._args import SIZE_RANGE, _int
from ._buffers import as_buffer, order_after_current_stream, same_kind
from ._library import CONFIG_MAGIC, CONFIG_UNDEF_INT, VERSION_CODE, Config, Stats, UniqueId, c_handle, call, lib
from .errors import BaguaError, InvalidArgumentError, InvalidUsageError, error_for


class ReduceOp(enum.IntEnum):
    """bagua_redop_t. Integer AVG truncates toward zero."""

    SUM = 0
    PROD = 1
    MIN = 2
    MAX = 3
    AVG = 4


OPKIND_NAMES = ("send", "recv", "barrier", "allreduce", "reduce_scatter", "allgather", "broadcast", "reduce",
                "alltoall", "alltoallv", "gather", "scatter", "quantized_allreduce", "neighbor_allreduce")

_group = threading.local()  # depth of bagua_group_start nesting on this thread, and what its calls need alive


def _in_group():
    return getattr(_group, "depth", 0) > 0


@contextlib.contextmanager
def group():
    """bagua_group_start/end: the calls inside progress together and complete when the block ends."""
    call("group_start")
    if not _in_group():
        _group.keep = []
    _group.depth = getattr(_group, "depth", 0) + 1
    try:
        yield
    finally:
        _group.depth -= 1
        try:
            call("group_end")
        finally:
            if _group.depth == 0:
                _group.keep = []


def _redop(op):
    try:
        return int(op)
    except (TypeError, ValueError):
        raise InvalidArgumentError(f"op {op!r} is not a ReduceOp") from None


class Request:
    """A non-blocking operation. wait() returns its output object; test() says whether it finished.
    Either raises the operation's error. The buffers and the communicator stay referenced until it finishes,
    and destroying the communicator first finishes it."""

    def __init__(self, comm, handle, keep, result):
        self._comm = comm
        self._handle = handle
        self._keep = keep
        self._result = result
        self._status = None
        self._lock = threading.Lock()  # one thread at a time hands the handle to the library, which frees it
        comm._requests.add(self)

    def _finish(self, status):
        self._handle = None
        self._keep = None
        self._comm._requests.discard(self)
        self._comm = None
        self._status = status
        if status != 0:
            self._error = error_for(status, lib.bagua_get_last_error(None).decode("utf-8", "replace"))

    def _result_or_raise(self):
        if self._status != 0:
            raise self._error
        return self._result

    def wait(self):
        with self._lock:  # (another thread's wait: this one returns with it)
            if self._handle is not None:
                self._finish(lib.bagua_wait(self._handle))  # bounded by the timeout
        return self._result_or_raise()

    def test(self):
        if not self._lock.acquire(blocking=False):
            return False  # another thread waits for it or tests it now
        try:
            if self._handle is not None:
                done = ctypes.c_int(0)
                status = lib.bagua_test(self._handle, ctypes.byref(done))
                if done.value or status not in (0, 1):
                    self._finish(status)
        finally:
            self._lock.release()
        if self._handle is not None:
            return False
        self._result_or_raise()
        return True

    def is_completed(self):
        return self._handle is None

    def __del__(self):
        # The library may still write into the buffers this request holds: finish it before they go.
        if getattr(self, "_handle", None) is not None:
            lib.bagua_wait(self._handle)


_live_communicators = weakref.WeakSet()


def _collective(prepare):
    """The blocking and non-blocking (i-prefixed) methods of one operation, from its argument check."""
    name = prepare.__name__.lstrip("_")

    def blocking(self, *args, stream=None, **kwargs):
        c_args, bufs, result = prepare(self, *args, **kwargs)
        self._call(name, c_args, bufs, stream)
        return result

    def nonblocking(self, *args, **kwargs):
        c_args, bufs, result = prepare(self, *args, **kwargs)
        order_after_current_stream(bufs)
        handle = c_handle()
        call("i" + name, *c_args, self._h(), ctypes.byref(handle))
        return Request(self, handle, bufs, result)

    blocking.__name__, nonblocking.__name__ = name, "i" + name
    blocking.__doc__ = prepare.__doc__
    nonblocking.__doc__ = f"Non-blocking {name}: returns a Request. " + (prepare.__doc__ or "")
    return blocking, nonblocking


class Communicator:
    """A bagua communicator. Usable as a context manager that destroys it."""

    def __init__(self, handle, parent=None):
        self._handle = handle
        self._parent = parent  # a split keeps its parent alive
        self._dependents = weakref.WeakSet()  # states, topologies, ... freed before the communicator
        self._active = set()  # schedulers and averaging threads: held until closed, they use buffers
        self._requests = weakref.WeakSet()  # unfinished requests, finished before the communicator goes
        rank, size = ctypes.c_int(), ctypes.c_int()
        call("comm_rank", handle, ctypes.byref(rank))
        call("comm_size", handle, ctypes.byref(size))
        self.rank, self.size = rank.value, size.value
        _live_communicators.add(self)

    @classmethod
    def from_env(cls):
        """bagua_comm_init_from_env: BAGUA_* (bagua-run), torchrun, Open MPI or Slurm variables."""
        handle = c_handle()
        call("comm_init_from_env", ctypes.byref(handle))
        return cls(handle)

    @classmethod
    def init_rank(cls, nranks, unique_id, rank, timeout_ms=None, name=None):
        """bagua_comm_init_rank_config with an id from get_unique_id() on one process."""
        if not isinstance(unique_id, (bytes, bytearray)) or len(unique_id) != 128:
            raise InvalidArgumentError("unique_id must be the 128 bytes get_unique_id() returned")
        uid = UniqueId()
        ctypes.memmove(uid.internal, bytes(unique_id), 128)
        config = Config(ctypes.sizeof(Config), CONFIG_MAGIC, VERSION_CODE,
                        CONFIG_UNDEF_INT if timeout_ms is None else _int(timeout_ms, "timeout_ms"),
                        CONFIG_UNDEF_INT, name.encode() if name else None)
        handle = c_handle()
        call("comm_init_rank_config", ctypes.byref(handle), _int(nranks, "nranks"), uid, _int(rank, "rank"),
             ctypes.byref(config))
        return cls(handle)

    def _h(self):
        if self._handle is None:
            raise InvalidUsageError("the communicator was destroyed")
        return self._handle

    def _call(self, name, c_args, bufs, stream):
        call(name, *c_args, self._h(), self._stream(bufs, stream))
        if _in_group():
            _group.keep.append(bufs)
        _buffers.record_on_stream(bufs, stream)

    @staticmethod
    def _stream(bufs, stream):
        for buf in bufs:
            if buf is not None:
                return _buffers.cuda_stream(buf, stream)
        return stream

    # ---- the communicator itself ----
    @property
    def local_rank(self):
        value = ctypes.c_int()
        call("comm_local_rank", self._h(), ctypes.byref(value))
        return value.value

    @property
    def local_size(self):
        value = ctypes.c_int()
        call("comm_local_size", self._h(), ctypes.byref(value))
        return value.value

    def split(self, color, key=0):
        """Collective: ranks with the same color form a new communicator (None for color < 0)."""
        handle = c_handle()
        call("comm_split", self._h(), _int(color, "color"), _int(key, "key"), ctypes.byref(handle))
        return Communicator(handle, self) if handle.value else None

    def shrink(self):
        """Collective over the survivors (also on a failed communicator): a new communicator of the ranks still
        alive, in their old order; every survivor gets the same members. Raises RemoteError on a minority side."""
        handle = c_handle()
        call("comm_shrink", self._h(), ctypes.byref(handle))
        return Communicator(handle)

    def async_error(self):
        """The communicator's poisoning error as an exception (None while healthy); never blocks."""
        status = ctypes.c_int(0)
        call("comm_get_async_error", self._h(), ctypes.byref(status))
        if status.value == 0:
            return None
        return error_for(status.value, lib.bagua_get_last_error(self._h()).decode("utf-8", "replace"))

    def stats(self):
        """bagua_comm_get_stats as a dict; ops and bytes_sent_by_op are keyed by operation name."""
        stats = Stats()
        stats.size = ctypes.sizeof(Stats)
        call("comm_get_stats", self._h(), ctypes.byref(stats))
        out = {name: getattr(stats, name) for name, _ in Stats._fields_ if name not in ("size", "ops",
                                                                                       "bytes_sent_by_op")}
        out["ops"] = {n: stats.ops[i] for i, n in enumerate(OPKIND_NAMES)}
        out["bytes_sent_by_op"] = {n: stats.bytes_sent_by_op[i] for i, n in enumerate(OPKIND_NAMES)}
        return out

    def dump_trace(self, path=None):
        """Writes the flight recorder (the last operations, their algorithm and state) to path; None: to
        BAGUA_TRACE_DIR when set, else to the log (docs/tracing.md)."""
        call("comm_dump_trace", self._h(), None if path is None else str(path).encode())

    def abort(self):
        """Poisons the communicator and wakes blocked calls; safe from any thread. Destroy it afterwards."""
        call("comm_abort", self._h())

    def destroy(self):
        """Frees the communicator (safe after an error), and first what was made on it (QState, Topology,
        LowPrecisionDecentralized, AsyncAverage). Later calls raise InvalidUsageError."""
        if self._handle is not None:
            for request in list(self._requests):
                try:
                    request.wait()
                except BaguaError:
                    pass  # its error is the request's to report
            for dependent in list(self._active) + list(self._dependents):
                try:
                    dependent.close()
                except Exception:
                    pass  # the communicator may have failed; its handles are freed all the same
            handle, self._handle = self._handle, None
            _live_communicators.discard(self)
            call("comm_destroy", handle)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.destroy()

    def __repr__(self):
        state = "destroyed" if self._handle is None else f"rank {self.rank} of {self.size}"
        return f"<bagua.Communicator {state}>"

    # ---- operations ----
    def _in_out(self, sendbuf, recvbuf, writable_send=False):
        send = as_buffer(sendbuf, "sendbuf", writable_send or recvbuf is None or recvbuf is sendbuf)
        if recvbuf is None or recvbuf is sendbuf:
            return send, send, sendbuf
        recv = as_buffer(recvbuf, "recvbuf", True)
        same_kind(send, recv, "sendbuf and recvbuf")
        return send, recv, recvbuf

    def _blocks(self, total, what):
        if total % self.size:
            raise InvalidArgumentError(f"{what} holds {total} elements, not a multiple of {self.size} ranks")
        return total // self.size

    def _root(self, root):
        root = _int(root, "root")
        if not 0 <= root < self.size:
            raise InvalidArgumentError(f"root {root} is not a rank of this communicator (size {self.size})")
        return root

    def barrier(self, stream=None):
        """Every rank has entered the barrier before any leaves it."""
        call("barrier", self._h(), getattr(stream, "cuda_stream", stream))

    def ibarrier(self):
        handle = c_handle()
        call("ibarrier", self._h(), ctypes.byref(handle))
        return Request(self, handle, None, None)

    def _allreduce(self, sendbuf, recvbuf=None, op=ReduceOp.SUM):
        """allreduce(sendbuf, recvbuf=None, op=SUM): recvbuf = op over ranks of sendbuf (in place without
        recvbuf)."""
        send, recv, result = self._in_out(sendbuf, recvbuf)
        if recv.count != send.count:
            raise InvalidArgumentError(f"allreduce: sendbuf has {send.count} elements, recvbuf {recv.count}")
        return (send.ptr, recv.ptr, send.count, send.dtype, _redop(op)), (send, recv), result

    allreduce, iallreduce = _collective(_allreduce)

    def _reduce_scatter(self, sendbuf, recvbuf, op=ReduceOp.SUM):
        """reduce_scatter(sendbuf, recvbuf, op=SUM): sendbuf holds size blocks of recvbuf's length; rank r
        receives the reduced block r."""
        send, recv, result = self._in_out(sendbuf, recvbuf)
        if send.count != recv.count * self.size:
            raise InvalidArgumentError(
                f"reduce_scatter: sendbuf has {send.count} elements, not {self.size} x recvbuf's {recv.count}")
        return (send.ptr, recv.ptr, recv.count, send.dtype, _redop(op)), (send, recv), result

    reduce_scatter, ireduce_scatter = _collective(_reduce_scatter)

    def _allgather(self, sendbuf, recvbuf):
        """allgather(sendbuf, recvbuf): recvbuf holds every rank's sendbuf, in rank order."""
        send, recv, result = self._in_out(sendbuf, recvbuf)
        if recv.count != send.count * self.size:
            raise InvalidArgumentError(
                f"allgather: recvbuf has {recv.count} elements, not {self.size} x sendbuf's {send.count}")
        return (send.ptr, recv.ptr, send.count, send.dtype), (send, recv), result

    allgather, iallgather = _collective(_allgather)

    def _broadcast(self, sendbuf, recvbuf=None, root=0):
        """broadcast(sendbuf, recvbuf=None, root=0): every rank receives root's sendbuf (in place without
        recvbuf)."""
        send, recv, result = self._in_out(sendbuf, recvbuf)
        if recv.count != send.count:
            raise InvalidArgumentError(f"broadcast: sendbuf has {send.count} elements, recvbuf {recv.count}")
        return (send.ptr, recv.ptr, send.count, send.dtype, self._root(root)), (send, recv), result

    broadcast, ibroadcast = _collective(_broadcast)

    def _reduce(self, sendbuf, recvbuf=None, op=ReduceOp.SUM, root=0):
        """reduce(sendbuf, recvbuf=None, op=SUM, root=0): root's recvbuf (its sendbuf without one) receives
        the reduction; other ranks' recvbuf is not written and may be None."""
        root = self._root(root)
        if self.rank == root:
            send, recv, result = self._in_out(sendbuf, recvbuf)
            if recv.count != send.count:
                raise InvalidArgumentError(f"reduce: sendbuf has {send.count} elements, recvbuf {recv.count}")
        else:
            send, result = as_buffer(sendbuf, "sendbuf", False), None
            recv = None if recvbuf is None else as_buffer(recvbuf, "recvbuf", True)
            if recv is not None:
                same_kind(send, recv, "sendbuf and recvbuf")
        return ((send.ptr, recv.ptr if recv else None, send.count, send.dtype, _redop(op), root), (send, recv),
                result)

    reduce, ireduce = _collective(_reduce)

    def _alltoall(self, sendbuf, recvbuf):
        """alltoall(sendbuf, recvbuf): block j of sendbuf goes to rank j; recvbuf's block i comes from rank i."""
        send = as_buffer(sendbuf, "sendbuf", False)
        recv = as_buffer(recvbuf, "recvbuf", True)
        same_kind(send, recv, "sendbuf and recvbuf")
        if recv.count != send.count:
            raise InvalidArgumentError(f"alltoall: sendbuf has {send.count} elements, recvbuf {recv.count}")
        count = self._blocks(send.count, "alltoall: sendbuf")
        return (send.ptr, recv.ptr, count, send.dtype), (send, recv), recvbuf

    alltoall, ialltoall = _collective(_alltoall)

    def _counts(self, values, what, limit):
        values = [_int(v, what, None) for v in values]
        if len(values) != self.size:
            raise InvalidArgumentError(f"alltoallv: {what} has {len(values)} entries, not {self.size}")
        if any(v < 0 for v in values):
            raise InvalidArgumentError(f"alltoallv: {what} has a negative entry")
        return values

    def _alltoallv(self, sendbuf, sendcounts, recvbuf, recvcounts, sdispls=None, rdispls=None):
        """alltoallv(sendbuf, sendcounts, recvbuf, recvcounts, sdispls=None, rdispls=None): counts and
        displacements in elements, one per rank; displacements default to the counts' prefix sums."""
        send = as_buffer(sendbuf, "sendbuf", False)
        recv = as_buffer(recvbuf, "recvbuf", True)
        same_kind(send, recv, "sendbuf and recvbuf")
        arrays = []
        for name, counts, displs, buf in (("send", sendcounts, sdispls, send), ("recv", recvcounts, rdispls, recv)):
            counts = self._counts(counts, name + "counts", buf.count)
            if displs is None:
                displs = [sum(counts[:i]) for i in range(self.size)]
            displs = self._counts(displs, name[0] + "displs", buf.count)
            if any(d + c > buf.count for c, d in zip(counts, displs)):
                raise InvalidArgumentError(f"alltoallv: a {name} block runs past {name}buf's {buf.count} elements")
            arrays += [(ctypes.c_size_t * self.size)(*counts), (ctypes.c_size_t * self.size)(*displs)]
        return ((send.ptr, arrays[0], arrays[1], recv.ptr, arrays[2], arrays[3], send.dtype), (send, recv, arrays),
                recvbuf)

    alltoallv, ialltoallv = _collective(_alltoallv)

    def _gather(self, sendbuf, recvbuf=None, root=0):
        """gather(sendbuf, recvbuf=None, root=0): root's recvbuf holds every rank's sendbuf in rank order;
        recvbuf is needed on root only."""
        root = self._root(root)
        send = as_buffer(sendbuf, "sendbuf", False)
        recv = None
        if self.rank == root:
            recv = as_buffer(recvbuf, "recvbuf", True)
            same_kind(send, recv, "sendbuf and recvbuf")
            if recv.count != send.count * self.size:
                raise InvalidArgumentError(
                    f"gather: recvbuf has {recv.count} elements, not {self.size} x sendbuf's {send.count}")
        return ((send.ptr, recv.ptr if recv else None, send.count, send.dtype, root), (send, recv),
                recvbuf if self.rank == root else None)

    gather, igather = _collective(_gather)

    def _scatter(self, sendbuf, recvbuf, root=0):
        """scatter(sendbuf, recvbuf, root=0): rank r receives block r of root's sendbuf; sendbuf is needed on
        root only."""
        root = self._root(root)
        recv = as_buffer(recvbuf, "recvbuf", True)
        send = None
        if self.rank == root:
            send = as_buffer(sendbuf, "sendbuf", False)
            same_kind(send, recv, "sendbuf and recvbuf")
            if send.count != recv.count * self.size:
                raise InvalidArgumentError(
                    f"scatter: sendbuf has {send.count} elements, not {self.size} x recvbuf's {recv.count}")
        return ((send.ptr if send else None, recv.ptr, recv.count, recv.dtype, root), (recv, send), recvbuf)

    scatter, iscatter = _collective(_scatter)

    def _peer(self, peer):
        peer = _int(peer, "peer")
        if not 0 <= peer < self.size:
            raise InvalidArgumentError(f"peer {peer} is not a rank of this communicator (size {self.size})")
        return peer

    def _send(self, buf, peer):
        """send(buf, peer): matched by the peer's k-th recv from this rank; counts must agree."""
        b = as_buffer(buf, "buf", False)
        return (b.ptr, b.count, b.dtype, self._peer(peer)), (b,), None

    send, isend = _collective(_send)

    def _recv(self, buf, peer):
        """recv(buf, peer): receives the peer's k-th send to this rank into buf."""
        b = as_buffer(buf, "buf", True)
        return (b.ptr, b.count, b.dtype, self._peer(peer)), (b,), buf

    recv, irecv = _collective(_recv)

    # ---- relaxations (relaxations.py has their states) ----
    def _quantized_allreduce(self, sendbuf, recvbuf=None, op=ReduceOp.AVG, compression=None, state=None):
        """quantized_allreduce(sendbuf, recvbuf=None, op=AVG, compression=None, state=None): the allreduce
        with compressed traffic (Compression(); min-max 8 bit by default). state: a QState, needed for error
        feedback. float32, float16 or bfloat16; SUM or AVG."""
        from .relaxations import Compression

        send, recv, result = self._in_out(sendbuf, recvbuf)
        if recv.count != send.count:
            raise InvalidArgumentError(
                f"quantized_allreduce: sendbuf has {send.count} elements, recvbuf {recv.count}")
        if compression is None:
            compression = state.compression if state is not None else Compression()
        if not isinstance(compression, Compression):
            raise InvalidArgumentError(f"compression must be a bagua.Compression, not {type(compression).__name__}")
        cfg = compression.as_struct()
        return ((send.ptr, recv.ptr, send.count, send.dtype, _redop(op), ctypes.byref(cfg),
                 state._h() if state is not None else None), (send, recv, cfg, state), result)

    quantized_allreduce, iquantized_allreduce = _collective(_quantized_allreduce)

    def _neighbor_allreduce(self, sendbuf, recvbuf=None, topology=None, step=0):
        """neighbor_allreduce(sendbuf, recvbuf=None, topology, step=0): gossip averaging over a Topology,
        x_i <- w_ii x_i + sum_j w_ji x_j. float32 or float64."""
        if topology is None:
            raise InvalidArgumentError("neighbor_allreduce: topology is None (create a bagua.Topology)")
        send, recv, result = self._in_out(sendbuf, recvbuf)
        if recv.count != send.count:
            raise InvalidArgumentError(
                f"neighbor_allreduce: sendbuf has {send.count} elements, recvbuf {recv.count}")
        return ((send.ptr, recv.ptr, send.count, send.dtype, topology._h(), _int(step, "step", SIZE_RANGE)),
                (send, recv, topology), result)

    neighbor_allreduce, ineighbor_allreduce = _collective(_neighbor_allreduce)


def get_unique_id():
    """128 opaque bytes: make them on one process and hand them to every rank for Communicator.init_rank."""
    uid = UniqueId()
    call("get_unique_id", ctypes.byref(uid))
    return ctypes.string_at(ctypes.addressof(uid), 128)


def destroy_all():
    """Destroys every communicator still alive, splits first (run at interpreter exit)."""
    for comm in sorted(list(_live_communicators), key=lambda c: c._parent is None):
        try:
            comm.destroy()
        except Exception:
            pass

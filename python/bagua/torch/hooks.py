"""Comm hooks for torch's own DistributedDataParallel: the gradients go over bagua's communicator.

    ddp = torch.nn.parallel.DistributedDataParallel(model)          # still needs a (gloo) process group
    ddp.register_comm_hook(bagua.torch.hooks.HookState(), bagua.torch.hooks.allreduce)

torch DDP keeps using its process group for the parameter broadcast, bucket rebuilding and the unused-parameter
checks; only the gradients take bagua. The hooks run the communication when torch hands them a bucket and return
a completed future. torch rebuilds its buckets after the first iteration, so the error-feedback state is keyed
by the bucket's parameters, and what a retired state still owes each parameter is carried into the next bucket
that holds it.
"""

import torch

from .. import default_communicator
from .._buffers import as_buffer
from ..relaxations import Compression, QState

AVG = 4


class HookState:
    """The communicator (default: bagua.init()'s) and the error-feedback states of the compressed hooks."""

    def __init__(self, comm=None):
        self.comm = comm or default_communicator()
        self._states = {}  # parameter ids -> (QState, [(param id, offset, numel)])
        self._carried = {}  # param id -> residual a retired state owed it
        self.retired = 0  # states retired because torch rebuilt its buckets

    def error_feedback(self, bucket, buffer, compression):
        """The QState for this bucket's parameters; a new one takes over what older states owed."""
        params = bucket.parameters()
        key = tuple(id(p) for p in params)
        entry = self._states.get(key)
        if entry is None:
            for other in [k for k in self._states if set(k) & set(key)]:
                self._retire(other)
            size = buffer.element_size()
            layout = [(id(p), (g.data_ptr() - buffer.data_ptr()) // size, g.numel())
                      for p, g in zip(params, bucket.gradients())]
            dtype = as_buffer(buffer, "bucket", True).dtype
            entry = (QState(self.comm, buffer.numel(), dtype, compression), layout)
            self._states[key] = entry
            with torch.no_grad():
                for pid, offset, n in layout:
                    owed = self._carried.pop(pid, None)
                    if owed is not None:
                        buffer[offset:offset + n] += owed.to(buffer.device, buffer.dtype)
        return entry[0]

    def _retire(self, key):
        state, layout = self._states.pop(key)
        self.retired += 1
        residual = torch.from_numpy(_as_numpy(state.residual()))
        for pid, offset, n in layout:
            self._carried[pid] = self._carried.get(pid, 0) + residual[offset:offset + n]
        state.close()

    def residual(self, param):
        """What error feedback still owes param on this rank (float32, flat)."""
        pid = id(param)
        total = torch.zeros(param.numel())
        if pid in self._carried:
            total += self._carried[pid]
        for state, layout in self._states.values():
            for owner, offset, n in layout:
                if owner == pid:
                    total += torch.from_numpy(_as_numpy(state.residual()))[offset:offset + n]
        return total


def _as_numpy(floats):
    import numpy as np

    return np.frombuffer(floats, dtype=np.float32).copy()


def _done(tensor):
    # A future holding a CUDA tensor names its device, so that DDP's use of the result waits for the current stream
    # (a CPU future does not synchronize CUDA values).
    future = torch.futures.Future(devices=[tensor.device]) if tensor.is_cuda else torch.futures.Future()
    future.set_result(tensor)
    return future


def allreduce(state, bucket):
    """Full-precision average of the bucket's gradients."""
    buffer = bucket.buffer()
    state.comm.allreduce(buffer, op=AVG)
    return _done(buffer)


def _compressed(state, bucket, compression):
    buffer = bucket.buffer()
    if buffer.dtype not in (torch.float32, torch.float16, torch.bfloat16):
        return allreduce(state, bucket)
    qstate = state.error_feedback(bucket, buffer, compression)
    state.comm.quantized_allreduce(buffer, op=AVG, compression=compression, state=qstate)
    return _done(buffer)


BYTEGRAD = Compression(bits=8, chunk=1024, error_feedback=True)
ONEBIT = Compression(kind="sign", chunk=1024, error_feedback=True)


def bytegrad(state, bucket):
    """Gradients averaged with 8-bit min-max compression and error feedback."""
    return _compressed(state, bucket, BYTEGRAD)


def onebit(state, bucket):
    """Gradients averaged as 1-bit signs with a scale per chunk, and error feedback."""
    return _compressed(state, bucket, ONEBIT)

"""bagua: collective communication and BAGUA's system relaxations, over libbagua's C API.

    import bagua
    comm = bagua.init()               # bagua-run, torchrun, Open MPI or Slurm environment
    bagua.allreduce(tensor)           # in place, on the default communicator
    comm.quantized_allreduce(grad, compression=bagua.Compression(bits=4))

docs/python.md has the whole API.
"""

import atexit

from ._buffers import DataType
from ._library import LibraryNotFoundError, candidate_paths
from ._library import path as _library_path
from ._version import __version__
from .communicator import Communicator, ReduceOp, Request, destroy_all, get_unique_id, group
from .errors import (AbortedError, BaguaError, BaguaSystemError, BaguaTimeoutError, CudaError, InternalError,
                     InvalidArgumentError, InvalidUsageError, NotSupportedError, RemoteError)
from .scheduler import BucketAlgorithm, Scheduler
from .relaxations import (AsyncAverage, CompressKind, Compression, Hierarchical, LowPrecisionDecentralized, QState,
                          Topology, TopologyKind)

SUM, PROD, MIN, MAX, AVG = ReduceOp.SUM, ReduceOp.PROD, ReduceOp.MIN, ReduceOp.MAX, ReduceOp.AVG

_default = None


def library_path():
    """The libbagua.so this package loaded."""
    return _library_path


def init():
    """Creates the default communicator from the launcher's environment and returns it. With a `with`
    statement it is destroyed at the end of the block."""
    global _default
    if _default is not None and _default._handle is not None:
        raise InvalidUsageError("bagua.init() was already called; destroy() the default communicator first")
    _default = Communicator.from_env()
    return _default


def is_initialized():
    return _default is not None and _default._handle is not None


def default_communicator():
    if not is_initialized():
        raise InvalidUsageError("bagua.init() has not been called")
    return _default


def destroy():
    """Destroys the default communicator."""
    global _default
    if _default is not None:
        comm, _default = _default, None
        comm.destroy()


def rank():
    return default_communicator().rank


def size():
    return default_communicator().size


def local_rank():
    return default_communicator().local_rank


def local_size():
    return default_communicator().local_size


def split(color, key=0):
    return default_communicator().split(color, key)


def _on_default(name):
    def operation(*args, **kwargs):
        return getattr(default_communicator(), name)(*args, **kwargs)

    operation.__name__ = name
    operation.__doc__ = f"{name} on the default communicator. " + (getattr(Communicator, name).__doc__ or "")
    return operation


for _name in ("barrier", "allreduce", "reduce_scatter", "allgather", "broadcast", "reduce", "alltoall", "alltoallv",
              "gather", "scatter", "send", "recv", "quantized_allreduce", "neighbor_allreduce"):
    globals()[_name] = _on_default(_name)
    globals()["i" + _name] = _on_default("i" + _name)
del _name

atexit.register(destroy_all)

"""torch.distributed's process group over the ranks of a bagua communicator, for what torch's own DDP still
needs next to bagua's comm hooks (the parameter broadcast, bucket rebuilding, unused-parameter checks)."""

import atexit
import os
import shutil
import tempfile

import torch.distributed as dist

from .. import default_communicator


def init_process_group(backend="gloo", comm=None):
    """torch.distributed.init_process_group for the ranks of comm (default: bagua.init()'s), same rank numbers.
    The rendezvous goes through a file that rank 0 creates and names to the others over bagua, so no MASTER_ADDR
    or port is needed; rank 0 removes it at exit."""
    comm = comm or default_communicator()
    name = bytearray(256)
    if comm.rank == 0:
        folder = tempfile.mkdtemp(prefix="bagua-torch-store-")
        atexit.register(shutil.rmtree, folder, True)
        path = os.path.join(folder, "store").encode()
        name[:len(path)] = path
    comm.broadcast(name, root=0)
    path = bytes(name).rstrip(b"\0").decode()
    dist.init_process_group(backend, init_method="file://" + path, rank=comm.rank, world_size=comm.size)

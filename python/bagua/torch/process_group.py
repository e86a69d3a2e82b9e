"""torch.distributed's process group over the ranks of a bagua communicator, for what torch's own DDP still
needs next to bagua's comm hooks (the parameter broadcast, bucket rebuilding, unused-parameter checks)."""

import atexit
import datetime
import os
import shutil
import tempfile

import torch.distributed as dist

from .. import default_communicator


def init_process_group(backend="gloo", comm=None, timeout=None):
    """torch.distributed.init_process_group for the ranks of comm (default: bagua.init()'s), same rank numbers.

    On one host the rendezvous goes through a file that rank 0 creates and names to the others over bagua, so no
    MASTER_ADDR or port is needed; rank 0 removes it at exit. Across hosts it is torch's env:// rendezvous, which
    needs MASTER_ADDR and MASTER_PORT (torchrun sets them; bagua's own root then listens on MASTER_PORT + 1).
    timeout (seconds) bounds the rendezvous and every later wait of the group; by default the communicator's."""
    comm = comm or default_communicator()
    seconds = comm.timeout if timeout is None else float(timeout)
    options = dict(rank=comm.rank, world_size=comm.size, timeout=datetime.timedelta(seconds=seconds))
    if comm.local_size != comm.size:
        if not os.environ.get("MASTER_ADDR") or not os.environ.get("MASTER_PORT"):
            raise RuntimeError(
                "bagua.torch.init_process_group: the communicator spans hosts, so torch's rendezvous needs "
                "MASTER_ADDR and MASTER_PORT (rank 0's host and a free port; bagua uses MASTER_PORT + 1 when it "
                "takes its own rendezvous from them)")
        dist.init_process_group(backend, init_method="env://", **options)
        return
    name = bytearray(256)
    if comm.rank == 0:
        folder = tempfile.mkdtemp(prefix="bagua-torch-store-")
        atexit.register(shutil.rmtree, folder, True)
        path = os.path.join(folder, "store").encode()
        name[:len(path)] = path
    comm.broadcast(name, root=0)
    path = bytes(name).rstrip(b"\0").decode()
    dist.init_process_group(backend, init_method="file://" + path, **options)

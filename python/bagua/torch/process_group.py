"""torch.distributed's process group over the ranks of a bagua communicator, for what torch's own DDP still
needs next to bagua's comm hooks (the parameter broadcast, bucket rebuilding, unused-parameter checks)."""

import atexit
import datetime
import os
import shutil
import tempfile

import torch.distributed as dist

from .. import ReduceOp, default_communicator


def init_process_group(backend="gloo", comm=None, timeout=None):
    """torch.distributed.init_process_group for the ranks of comm (default: bagua.init()'s), same rank numbers.

    The rendezvous goes through a file that rank 0 creates and names to the others over bagua, so no MASTER_ADDR
    or port is needed, where every rank sees rank 0's temporary folder (one host, or a shared TMPDIR); rank 0
    removes it at exit. Otherwise it is torch's env:// rendezvous, which needs MASTER_ADDR and MASTER_PORT
    (torchrun sets them; bagua's own root then listens on MASTER_PORT + 1), and without them it raises at once.
    timeout (seconds or a timedelta) is torch's, for the rendezvous and the group's operations; None: torch's
    default."""
    comm = comm or default_communicator()
    options = dict(rank=comm.rank, world_size=comm.size)
    if timeout is not None:
        options["timeout"] = timeout if isinstance(timeout, datetime.timedelta) else datetime.timedelta(
            seconds=float(timeout))
    name = bytearray(256)
    if comm.rank == 0:
        folder = tempfile.mkdtemp(prefix="bagua-torch-store-")
        atexit.register(shutil.rmtree, folder, True)
        path = os.path.join(folder, "store").encode()
        name[:len(path)] = path
    comm.broadcast(name, root=0)
    path = bytes(name).rstrip(b"\0").decode()
    seen_by_all = bytearray([1 if os.path.isdir(os.path.dirname(path)) else 0])  # (uint8)
    comm.allreduce(seen_by_all, op=ReduceOp.MIN)
    if seen_by_all[0] == 1:
        dist.init_process_group(backend, init_method="file://" + path, **options)
        return
    if not os.environ.get("MASTER_ADDR") or not os.environ.get("MASTER_PORT"):
        raise RuntimeError(
            f"bagua.torch.init_process_group: some ranks do not see rank 0's temporary folder ({os.path.dirname(path)}"
            "), so torch's rendezvous needs MASTER_ADDR and MASTER_PORT (rank 0's host and a free port; bagua uses "
            "MASTER_PORT + 1 when it takes its own rendezvous from them), or a TMPDIR every rank shares")
    dist.init_process_group(backend, init_method="env://", **options)

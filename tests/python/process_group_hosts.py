"""Run under bagua-run with rank 1 in a mount namespace of its own whose /tmp is a private tmpfs (so it cannot see
rank 0's temporary folder, as on another host): bagua.torch.init_process_group must refuse at once on every rank
without MASTER_ADDR/MASTER_PORT, naming them, and with them form torch's group through env:// (an all_reduce over
gloo then sums the ranks)."""

import os
import socket
import sys
import time

import torch
import torch.distributed as dist

import bagua
import bagua.torch

comm = bagua.init()
for name in ("MASTER_ADDR", "MASTER_PORT"):
    os.environ.pop(name, None)
start = time.monotonic()
try:
    bagua.torch.init_process_group("gloo", comm, timeout=60)
    sys.exit("init_process_group without a shared folder or MASTER_ADDR did not raise")
except RuntimeError as e:
    assert "MASTER_ADDR" in str(e) and "MASTER_PORT" in str(e), e
assert time.monotonic() - start < 5.0  # refused, not waited out

port = bytearray(8)
if comm.rank == 0:
    with socket.socket() as s:  # a free port for torch's store, named to the others over bagua
        s.bind(("127.0.0.1", 0))
        port[:] = s.getsockname()[1].to_bytes(8, "little")
comm.broadcast(port, root=0)
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(int.from_bytes(port, "little")))
bagua.torch.init_process_group("gloo", comm, timeout=60)
x = torch.tensor([float(comm.rank + 1)])
dist.all_reduce(x)
assert x.item() == comm.size * (comm.size + 1) / 2, x
dist.destroy_process_group()
bagua.destroy()
if comm.rank == 0:
    print(f"process group where rank 0's folder is not seen: refused without MASTER_ADDR, formed with it: ok")

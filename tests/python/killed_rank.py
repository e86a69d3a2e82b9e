"""Run with launch.py --killed (n - 1): the last rank dies by SIGKILL; every survivor's next call must raise
RemoteError (or BaguaTimeoutError) within BAGUA_TIMEOUT plus a margin, and later calls must raise too, never
hang. Mode "collectives" (default) dies after an allreduce, and the survivors then shrink the communicator and
check an allreduce on it; mode "ddp" dies in the middle of training with
bagua.torch.DistributedDataParallel, where the error comes out of loss.backward()."""

import os
import signal
import sys
import time

import numpy as np

import bagua

mode = sys.argv[1] if len(sys.argv) > 1 else "collectives"
comm = bagua.init()
victim = comm.rank == comm.size - 1
timeout = float(os.environ.get("BAGUA_TIMEOUT", "30"))


def die_soon():
    time.sleep(1)  # let the survivors leave the last collective first
    os.kill(os.getpid(), signal.SIGKILL)


def expect_failure(step):
    start = time.monotonic()
    try:
        for _ in range(1000):
            step()
        raise SystemExit(f"rank {comm.rank}: no error after the peer died")
    except (bagua.RemoteError, bagua.BaguaTimeoutError) as err:
        took = time.monotonic() - start
        print(f"rank {comm.rank} ({mode}): {type(err).__name__} after {took:.2f} s: {err.message}")
        assert took <= timeout + 5, took


if mode == "collectives":
    x = np.ones(1 << 16, np.float32)
    comm.allreduce(x)
    assert (x == comm.size).all()
    comm.barrier()
    if victim:
        die_soon()
    expect_failure(lambda: comm.allreduce(x))
else:
    import torch

    import bagua.torch as bt

    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))
    ddp = bt.DistributedDataParallel(net)
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    x, y = torch.randn(32, 64), torch.randint(0, 10, (32,))

    def train_step():
        opt.zero_grad()
        torch.nn.functional.cross_entropy(ddp(x), y).backward()
        opt.step()

    for _ in range(5):
        train_step()
    comm.barrier()
    if victim:
        die_soon()
    expect_failure(train_step)
try:
    comm.allreduce(np.ones(4, np.float32))
    raise SystemExit(f"rank {comm.rank}: a call on the failed communicator succeeded")
except bagua.BaguaError:
    assert isinstance(comm.async_error(), bagua.BaguaError)
if mode == "collectives":
    survivors = comm.shrink()  # the victim was the last rank: the others keep their ranks
    assert (survivors.size, survivors.rank) == (comm.size - 1, comm.rank), (survivors.size, survivors.rank)
    y = np.ones(1 << 10, np.int32)
    survivors.allreduce(y)
    assert (y == survivors.size).all()
    print(f"rank {comm.rank}: shrank to {survivors.size} ranks; allreduce on them ok")
    survivors.destroy()
bagua.destroy()

"""Run with launch.py --killed (n - 1): the last rank dies by SIGKILL after one allreduce; every survivor's next
allreduce must raise RemoteError (or TimeoutError) within BAGUA_TIMEOUT plus a margin, and later calls must
raise too, never hang."""

import os
import signal
import time

import numpy as np

import bagua

comm = bagua.init()
x = np.ones(1 << 16, np.float32)
comm.allreduce(x)
assert (x == comm.size).all()
comm.barrier()
if comm.rank == comm.size - 1:
    time.sleep(1)  # let the survivors leave the barrier first
    os.kill(os.getpid(), signal.SIGKILL)
timeout = float(os.environ.get("BAGUA_TIMEOUT", "30"))
start = time.monotonic()
try:
    for _ in range(1000):
        comm.allreduce(x)
    raise SystemExit(f"rank {comm.rank}: no error after the peer died")
except (bagua.RemoteError, bagua.BaguaTimeoutError) as err:
    took = time.monotonic() - start
    print(f"rank {comm.rank}: {type(err).__name__} after {took:.2f} s: {err.message}")
    assert took <= timeout + 5, took
try:
    comm.allreduce(x)
    raise SystemExit(f"rank {comm.rank}: a call on the failed communicator succeeded")
except bagua.BaguaError as err:
    assert isinstance(comm.async_error(), bagua.BaguaError)
bagua.destroy()

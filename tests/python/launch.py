"""Starts N copies of a Python command as torchrun would: RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
MASTER_ADDR and MASTER_PORT set, no BAGUA_* launcher variables. Exits 0 when every rank did, or, with
--killed R, when rank R died by SIGKILL and every other rank exited 0. Gives up after --timeout seconds.

    python3 launch.py -n 2 [--killed R] [--timeout S] -- python3 -m pytest ...
"""

import argparse
import os
import signal
import socket
import subprocess
import sys
import time


def free_port_pair():
    """A port p with p + 1 free too (bagua's root listens on MASTER_PORT + 1)."""
    for _ in range(100):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        try:
            with socket.socket() as s:
                s.bind(("127.0.0.1", port + 1))
            return port
        except OSError:
            continue
    raise RuntimeError("no free port pair")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("-n", type=int, required=True)
    parser.add_argument("--killed", type=int, default=None)
    parser.add_argument("--timeout", type=float, default=240)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    port = free_port_pair()
    env = {k: v for k, v in os.environ.items() if not k.startswith("BAGUA_") or k in (
        "BAGUA_TIMEOUT", "BAGUA_QUANTIZED_MIN_BYTES", "BAGUA_QUANTIZED_ONE_ROUND_BYTES", "BAGUA_PIPELINED_STAGING",
        "BAGUA_LIBRARY", "BAGUA_LOG_LEVEL")}
    env.update(WORLD_SIZE=str(args.n), LOCAL_WORLD_SIZE=str(args.n), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    procs = [subprocess.Popen(command, env=dict(env, RANK=str(r), LOCAL_RANK=str(r))) for r in range(args.n)]
    deadline = time.monotonic() + args.timeout
    while any(p.poll() is None for p in procs) and time.monotonic() < deadline:
        time.sleep(0.05)
    failed = []
    for r, p in enumerate(procs):
        if p.poll() is None:
            p.kill()
            p.wait()
            failed.append(f"rank {r} still running after {args.timeout:.0f} s (killed)")
        elif r == args.killed:
            if p.returncode != -signal.SIGKILL:
                failed.append(f"rank {r} should have died by SIGKILL, exited {p.returncode}")
        elif p.returncode != 0:
            failed.append(f"rank {r} exited {p.returncode}")
    for line in failed:
        print("launch.py:", line, file=sys.stderr)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""The link-rate reference for the test bed: each rank sends a message to the next over a plain TCP socket and
receives one from the previous, like bagua_sendrecv_perf: rounds back to back (an idle link would refill the
shaper's burst), and rank 0 prints the mean time per round.

    scripts/netns-cluster.sh run --hosts 4 --ranks-per-host 1 --rate 1gbit -- \
        python3 perf/netns/tcp_ring.py [sizes in bytes, default 262144 1048576 4194304] [--iters 20]

Ranks find each other by the test bed's addresses: host h is <BAGUA_TESTBED_SUBNET>.<h+1>, and
BAGUA_TESTBED_HOSTS names each rank's host (netns-cluster.sh sets both).
"""
import os
import socket
import sys
import threading
import time


def address(rank, host_of):
    return f"{os.environ['BAGUA_TESTBED_SUBNET']}.{host_of[rank] + 1}", 17000 + rank


def connect(peer, deadline):
    while True:
        try:
            return socket.create_connection(peer, timeout=5)
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def main():
    args = sys.argv[1:]
    iters = 20
    if "--iters" in args:
        at = args.index("--iters")
        iters = int(args[at + 1])
        del args[at:at + 2]
    sizes = [int(a) for a in args] or [262144, 1048576, 4194304]
    rank, n = int(os.environ["BAGUA_RANK"]), int(os.environ["BAGUA_WORLD_SIZE"])
    host_of = [int(h) for h in os.environ["BAGUA_TESTBED_HOSTS"].split()]
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(address(rank, host_of))
    listener.listen(1)
    listener.settimeout(30)
    deadline = time.monotonic() + 30
    accepted = {}

    def accept():
        try:
            accepted["sock"] = listener.accept()[0]
        except OSError:
            pass

    acceptor = threading.Thread(target=accept)
    acceptor.start()
    to_next = connect(address((rank + 1) % n, host_of), deadline)
    acceptor.join()
    if "sock" not in accepted:
        sys.exit(f"tcp_ring: rank {rank}: rank {(rank - 1) % n} did not connect within 30 s")
    from_prev = accepted["sock"]
    for s in (to_next, from_prev):
        s.settimeout(30)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def barrier():  # a token around the ring twice: every rank has finished the previous round
        for _ in range(2):
            if rank == 0:
                to_next.sendall(b"t")
                from_prev.recv(1)
            else:
                from_prev.recv(1)
                to_next.sendall(b"t")

    def one_round(out, view, size):
        sender = threading.Thread(target=to_next.sendall, args=(out,))
        sender.start()
        got = 0
        while got < size:
            k = from_prev.recv_into(view[got:])
            if k == 0:
                raise RuntimeError("the previous rank closed its socket")
            got += k
        sender.join()

    for size in sizes:
        out, into = bytes(size), bytearray(size)
        view = memoryview(into)
        for _ in range(2):  # warm-up
            one_round(out, view, size)
        barrier()
        start = time.perf_counter()
        for _ in range(iters):
            one_round(out, view, size)
        mean = (time.perf_counter() - start) * 1e3 / iters
        if rank == 0:
            print(f"{size:>10} bytes  {mean:8.2f} ms per round (mean of {iters} back to back)")


if __name__ == "__main__":
    main()

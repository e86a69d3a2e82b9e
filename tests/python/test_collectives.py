"""Every collective and point-to-point call of the binding, on every rank, bit-exact: the inputs are small
non-negative integers, so every sum, product, min, max and average is exact in every dtype."""

import numpy as np
import pytest
import torch

import bagua
from buffers import CASES, make, values, zeros

COUNT = 37  # not a multiple of anything in particular


def data(rank, count=COUNT, salt=0):
    """Rank r's input: (r + 1) * (i % 3 + 1) + salt, at most 4 * 3 + salt."""
    return [(rank + 1) * (i % 3 + 1) + salt for i in range(count)]


def test_identity(comm):
    assert 0 <= comm.rank < comm.size
    assert bagua.rank() == comm.rank and bagua.size() == comm.size
    assert 0 <= comm.local_rank < comm.local_size <= comm.size
    assert bagua.__version__ == "%d.%d.%d" % tuple(int(x) for x in bagua.__version__.split("."))


@pytest.mark.parametrize("kind,dtype", CASES)
def test_allreduce_sum_every_dtype(comm, kind, dtype):
    buf = make(kind, dtype, data(comm.rank))
    assert bagua.allreduce(buf) is buf
    n = comm.size
    assert values(buf) == [n * (n + 1) / 2 * (i % 3 + 1) for i in range(COUNT)]


@pytest.mark.parametrize("op", [bagua.SUM, bagua.PROD, bagua.MIN, bagua.MAX, bagua.AVG])
@pytest.mark.parametrize("kind,dtype", [("torch", "float32"), ("numpy", "int32"), ("array", "float64")])
def test_allreduce_ops_out_of_place(comm, kind, dtype, op):
    send = make(kind, dtype, data(comm.rank))
    recv = zeros(kind, dtype, COUNT)
    before = values(send)
    assert comm.allreduce(send, recv, op=op) is recv
    assert values(send) == before
    columns = [[(r + 1) * (i % 3 + 1) for r in range(comm.size)] for i in range(COUNT)]
    reduce = {bagua.SUM: sum, bagua.PROD: np.prod, bagua.MIN: min, bagua.MAX: max,
              bagua.AVG: lambda c: sum(c) / len(c) if dtype != "int32" else int(sum(c) / len(c))}[op]
    assert values(recv) == [float(reduce(c)) for c in columns]


@pytest.mark.parametrize("kind,dtype", [("torch", "bfloat16"), ("numpy", "uint64"), ("array", "int8")])
def test_reduce_scatter(comm, kind, dtype):
    n = comm.size
    send = make(kind, dtype, data(comm.rank, COUNT * n))
    recv = zeros(kind, dtype, COUNT)
    comm.reduce_scatter(send, recv)
    assert values(recv) == [n * (n + 1) / 2 * ((comm.rank * COUNT + i) % 3 + 1) for i in range(COUNT)]


@pytest.mark.parametrize("kind,dtype", [("torch", "float16"), ("numpy", "int64"), ("array", "uint32")])
def test_allgather(comm, kind, dtype):
    recv = zeros(kind, dtype, COUNT * comm.size)
    comm.allgather(make(kind, dtype, data(comm.rank)), recv)
    assert values(recv) == [v for r in range(comm.size) for v in data(r)]


@pytest.mark.parametrize("kind,dtype", [("torch", "int64"), ("numpy", "float32"), ("array", "uint8")])
def test_broadcast_every_root_in_place_and_not(comm, kind, dtype):
    for root in range(comm.size):
        buf = make(kind, dtype, data(comm.rank, salt=root))
        comm.broadcast(buf, root=root)
        assert values(buf) == data(root, salt=root)
        recv = zeros(kind, dtype, COUNT)
        comm.broadcast(make(kind, dtype, data(comm.rank)), recv, root=root)
        assert values(recv) == data(root)


@pytest.mark.parametrize("kind,dtype", [("torch", "float64"), ("numpy", "uint8"), ("array", "int32")])
def test_reduce_every_root(comm, kind, dtype):
    n = comm.size
    for root in range(n):
        recv = zeros(kind, dtype, COUNT) if comm.rank == root else None
        out = comm.reduce(make(kind, dtype, data(comm.rank)), recv, op=bagua.MAX, root=root)
        if comm.rank == root:
            assert out is recv and values(recv) == data(n - 1)
        else:
            assert out is None


@pytest.mark.parametrize("kind,dtype", [("torch", "int32"), ("numpy", "float16"), ("array", "int64")])
def test_alltoall(comm, kind, dtype):
    n = comm.size
    send = make(kind, dtype, [comm.rank * 10 + j for j in range(n) for _ in range(3)])
    recv = zeros(kind, dtype, 3 * n)
    comm.alltoall(send, recv)
    assert values(recv) == [r * 10 + comm.rank for r in range(n) for _ in range(3)]


def test_alltoallv_uneven(comm):
    n, me = comm.size, comm.rank
    # rank r sends r + j + 1 elements, of value 100 r + j, to rank j
    sendcounts = [me + j + 1 for j in range(n)]
    recvcounts = [r + me + 1 for r in range(n)]
    send = torch.tensor([100 * me + j for j in range(n) for _ in range(sendcounts[j])], dtype=torch.int32)
    recv = torch.full((sum(recvcounts),), -1, dtype=torch.int32)
    comm.alltoallv(send, sendcounts, recv, recvcounts)
    assert recv.tolist() == [100 * r + me for r in range(n) for _ in range(recvcounts[r])]


@pytest.mark.parametrize("kind,dtype", [("torch", "uint8"), ("numpy", "float64"), ("array", "float32")])
def test_gather_and_scatter_every_root(comm, kind, dtype):
    n = comm.size
    for root in range(n):
        recv = zeros(kind, dtype, COUNT * n) if comm.rank == root else None
        comm.gather(make(kind, dtype, data(comm.rank)), recv, root=root)
        if comm.rank == root:
            assert values(recv) == [v for r in range(n) for v in data(r)]
        piece = zeros(kind, dtype, COUNT)
        send = make(kind, dtype, [v for r in range(n) for v in data(r, salt=1)]) if comm.rank == root else None
        comm.scatter(send, piece, root=root)
        assert values(piece) == data(comm.rank, salt=1)


def test_send_recv_ring_in_a_group(comm):
    n, me = comm.size, comm.rank
    got = np.zeros(5, np.float32)
    with bagua.group():
        comm.send(np.full(5, me, np.float32), (me + 1) % n)  # a temporary: the group keeps it alive
        comm.recv(got, (me - 1) % n)
    assert got.tolist() == [float((me - 1) % n)] * 5


def test_send_recv_pairs_blocking(comm):
    n, me = comm.size, comm.rank
    if n == 1:
        pytest.skip("needs two ranks")
    buf = torch.zeros(1000, dtype=torch.int64)
    if me % 2 == 0 and me + 1 < n:
        comm.send(torch.arange(1000), me + 1)
        comm.recv(buf, me + 1)
        assert buf.tolist() == list(range(1000, 2000))
    elif me % 2 == 1:
        comm.recv(buf, me - 1)
        comm.send(buf + 1000, me - 1)


def test_nonblocking_forms(comm):
    n, me = comm.size, comm.rank
    a = torch.full((1 << 16,), float(me + 1))
    b = np.zeros(COUNT * n, np.int32)
    c = np.full(8, me, np.float64)
    requests = [comm.iallreduce(a), comm.iallgather(np.array(data(me), np.int32), b),
                comm.ibroadcast(c, root=n - 1), comm.ibarrier()]
    while not requests[0].test():
        pass
    assert requests[0].wait() is a
    assert requests[1].wait() is b
    assert requests[2].wait() is c
    assert requests[3].wait() is None
    assert (a == n * (n + 1) / 2).all()
    assert b.tolist() == [v for r in range(n) for v in data(r)]
    assert c.tolist() == [n - 1.0] * 8
    got = np.zeros(3, np.int64)
    recv = comm.irecv(got, (me - 1) % n)
    send = comm.isend(np.full(3, me, np.int64), (me + 1) % n)
    send.wait()
    assert recv.wait() is got and got.tolist() == [(me - 1) % n] * 3
    for form in ("ireduce_scatter", "ireduce", "ialltoall", "igather", "iscatter"):
        assert hasattr(comm, form) and hasattr(bagua, form)


def test_split(comm):
    sub = comm.split(comm.rank % 2, key=-comm.rank)
    with sub:
        members = [r for r in range(comm.size) if r % 2 == comm.rank % 2]
        assert sub.size == len(members)
        assert sub.rank == len(members) - 1 - members.index(comm.rank)  # key orders them descending
        t = torch.tensor([float(comm.rank)])
        sub.allreduce(t)
        assert t.item() == float(sum(members))
    assert comm.split(-1) is None
    with pytest.raises(bagua.InvalidUsageError):
        sub.allreduce(t)


def test_stats_count_operations(comm):
    before = comm.stats()
    comm.allreduce(np.ones(4, np.float32))
    after = comm.stats()
    assert after["ops"]["allreduce"] == before["ops"]["allreduce"] + 1
    assert comm.async_error() is None


def test_dump_trace(comm, tmp_path):
    comm.allreduce(np.ones(4, np.float32))
    path = tmp_path / f"trace-rank{comm.rank}.txt"
    comm.dump_trace(path)
    text = path.read_text()
    assert text.startswith("# bagua flight recorder: comm ") and f"rank {comm.rank} of {comm.size}" in text
    assert "allreduce #" in text


def test_zero_elements(comm):
    buf = np.zeros(0, np.float32)
    assert comm.allreduce(buf) is buf

"""Bad input raises the right BaguaError subclass with a message, before anything is sent, and leaves the
communicator usable; errors the library finds carry bagua_get_last_error's message."""

import array

import numpy as np
import pytest
import torch

import bagua


def still_usable(comm):
    """A collective after the error gives the exact answer on every rank: nothing half-sent is pending."""
    t = torch.ones(16)
    comm.allreduce(t)
    assert (t == comm.size).all()


@pytest.mark.parametrize("buf,words", [
    (torch.ones(4, 4).t(), "not contiguous"),
    (np.ones((4, 4), np.float32)[:, 1], "not C-contiguous"),
    (np.asfortranarray(np.ones((4, 4), np.float32)), "not C-contiguous"),  # its blocks would be out of order
    (torch.ones(3, dtype=torch.complex64), "no bagua datatype"),
    (np.ones(3, np.int16), "no bagua datatype"),
    (np.ones(3, bool), "no bagua datatype"),
    (np.ones(3, ">f4"), "byte order"),
    (object(), "neither a tensor"),
    (None, "is None"),
])
def test_bad_buffers_raise_before_sending(comm, buf, words):
    with pytest.raises(bagua.InvalidArgumentError, match=words) as info:
        comm.allreduce(buf)
    assert info.value.status == -1 and isinstance(info.value, ValueError)
    still_usable(comm)


def test_size_mismatch_raises_before_sending(comm):
    with pytest.raises(bagua.InvalidArgumentError, match="4 elements, recvbuf 5"):
        comm.allreduce(np.ones(4, np.float32), np.zeros(5, np.float32))
    with pytest.raises(bagua.InvalidArgumentError, match="dtypes differ"):
        comm.allreduce(np.ones(4, np.float32), np.zeros(4, np.float64))
    with pytest.raises(bagua.InvalidArgumentError, match="not .* x sendbuf"):
        comm.allgather(np.ones(4, np.float32), np.zeros(4 * comm.size + 1, np.float32))
    with pytest.raises(bagua.InvalidArgumentError, match="read-only"):
        comm.allreduce(np.ones(4, np.float32), bytes(16))
    with pytest.raises(bagua.InvalidArgumentError, match="read-only"):
        comm.allreduce(array.array("f", [1.0]), memoryview(bytes(4)).cast("f"))
    with pytest.raises(bagua.InvalidArgumentError, match="root"):
        comm.broadcast(np.ones(4), root=comm.size)
    with pytest.raises(bagua.InvalidArgumentError, match="peer"):
        comm.send(np.ones(4), -1)
    with pytest.raises(bagua.InvalidArgumentError, match="entries"):
        comm.alltoallv(np.ones(4), [1] * (comm.size + 1), np.ones(4), [1] * (comm.size + 1))
    still_usable(comm)


def test_read_only_send_buffer_is_fine(comm):
    out = array.array("d", [0.0] * 3)
    comm.allreduce(memoryview(bytes(array.array("d", [1.0, 2.0, 3.0]))).cast("d"), out)
    assert list(out) == [comm.size * v for v in (1.0, 2.0, 3.0)]


def test_library_errors_carry_its_message(comm):
    with pytest.raises(bagua.InvalidArgumentError, match="bagua_allreduce: op 17") as info:
        comm.allreduce(np.ones(4, np.float32), op=17)
    assert info.value.status_name == "BAGUA_ERR_INVALID_ARGUMENT"
    with pytest.raises(bagua.InvalidArgumentError):
        comm.quantized_allreduce(np.ones(8, np.float64))  # float64 has no quantized form
    with pytest.raises(bagua.InvalidArgumentError, match="compression kind"):
        comm.quantized_allreduce(np.ones(8, np.float32), compression=bagua.Compression(kind="zip"))
    still_usable(comm)


def test_mismatched_collective_is_invalid_usage_on_every_rank(comm):
    if comm.size == 1:
        pytest.skip("needs two ranks")
    # The mismatch poisons this communicator only. A rank that sees it gets INVALID_USAGE; a rank that learns
    # of it from a peer's failure notice gets REMOTE naming that peer's error.
    with comm.split(0) as private:
        with pytest.raises((bagua.InvalidUsageError, bagua.RemoteError), match="called allreduce with"):
            private.allreduce(np.ones(1 << 20 if private.rank == 0 else 1 << 19, np.float32))
        assert isinstance(private.async_error(), bagua.BaguaError)
    still_usable(comm)


def test_destroyed_communicator_refuses_calls(comm):
    sub = comm.split(0)
    sub.destroy()
    sub.destroy()  # twice is harmless
    with pytest.raises(bagua.InvalidUsageError, match="destroyed"):
        sub.allreduce(np.ones(4))


def test_request_errors_raise_at_wait(comm):
    if comm.size == 1:
        pytest.skip("needs two ranks")
    with comm.split(0) as private:
        req = private.iallreduce(np.ones(1 << 20 if private.rank == 0 else 1 << 19, np.float32))
        with pytest.raises((bagua.InvalidUsageError, bagua.RemoteError)) as first:
            req.wait()
        with pytest.raises(type(first.value)):
            req.wait()  # the same error again, not a crash
    still_usable(comm)


def test_destroy_frees_what_was_made_on_the_communicator(comm):
    sub = comm.split(0)
    state = bagua.QState(sub, 100)
    topo = bagua.Topology(sub, "ring")
    sub.destroy()
    with pytest.raises(bagua.InvalidUsageError, match="closed"):
        state.residual()
    with pytest.raises(bagua.InvalidUsageError, match="closed"):
        topo.check()


def test_request_outliving_its_communicator_is_finished_by_destroy(comm):
    sub = comm.split(0)
    x = np.ones(1 << 16, np.float32)
    req = sub.iallreduce(x)
    sub.destroy()  # finishes the request first
    assert req.is_completed() and req.wait() is x and (x == comm.size).all()


def test_residual_needs_a_host_float32_buffer(comm):
    with bagua.QState(comm, 8) as state:
        with pytest.raises(bagua.InvalidArgumentError, match="float32"):
            state.residual(np.zeros(8, np.float64))
        with pytest.raises(bagua.InvalidArgumentError, match="8"):
            state.residual(np.zeros(9, np.float32))


def test_numpy_scalar_send_buffer_stays_alive(comm):
    # A NumPy scalar's array interface is backed by a temporary array: the binding keeps it while the call runs.
    out = np.zeros(1, np.float32)
    comm.allreduce(np.float32(3.0), out)
    assert out[0] == 3.0 * comm.size


def test_in_place_on_a_read_only_buffer_raises(comm):
    x = np.ones(4, np.float32)
    x.flags.writeable = False
    with pytest.raises(bagua.InvalidArgumentError, match="read-only"):
        comm.allreduce(x, x)
    with pytest.raises(bagua.InvalidArgumentError, match="read-only"):
        comm.broadcast(memoryview(bytes(16)).cast("f"), memoryview(bytes(16)).cast("f"))  # (distinct objects)
    assert (x == 1).all()
    still_usable(comm)


def test_integers_outside_the_c_range_raise(comm):
    with pytest.raises(bagua.InvalidArgumentError, match="outside"):
        comm.split(2**32 + 3)
    with pytest.raises(bagua.InvalidArgumentError, match="outside"):
        bagua.QState(comm, -1)
    with pytest.raises(bagua.InvalidArgumentError, match="released"):
        view = memoryview(np.ones(4, np.float32))
        view.release()
        comm.allreduce(view)
    still_usable(comm)


def test_a_request_waited_by_two_threads_finishes_once(comm):
    import threading

    x = np.ones(1 << 16, np.float32)
    req = comm.iallreduce(x)
    results = []
    threads = [threading.Thread(target=lambda: results.append(req.wait())) for _ in range(2)]
    for t in threads:
        t.start()
    req.test()  # a third caller meanwhile: false or true, never a second free
    for t in threads:
        t.join()
    assert len(results) == 2 and all(r is x for r in results) and (x == comm.size).all()


def test_wrong_kinds_of_arguments_raise_invalid_argument(comm):
    with pytest.raises(bagua.InvalidArgumentError, match="src"):
        bagua.Topology.from_edges(comm, [0.5], [0])
    with pytest.raises(bagua.InvalidArgumentError, match="weights"):
        bagua.Topology.from_edges(comm, [0], [0], weights=["heavy"])
    with pytest.raises(bagua.InvalidArgumentError, match="Compression"):
        comm.quantized_allreduce(np.ones(4, np.float32), compression={"bits": 4})
    x = np.ones(4, np.float32)
    sched = bagua.Scheduler(comm)
    try:
        sched.register([x])
        with pytest.raises(bagua.InvalidArgumentError, match="cudaEvent_t"):
            sched.mark_ready(0, event="after the copy")
        sched.mark_ready(0)
        sched.wait()
        assert (x == 1).all()  # the average of ones
    finally:
        sched.close()
    still_usable(comm)

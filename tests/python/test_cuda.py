"""CUDA tensors through the binding (skipped without a GPU; scripts/gpu-check.sh runs them on the GPU machine,
where every rank shares the one GPU). Oracles as on the host: small integers make sums exact; quantized results
within the 8-bit bound of test_relaxations.py; DDP against torch DDP over gloo on the same CUDA model within
1e-5 relative, parameters bitwise equal across ranks; torch DDP with bagua's allreduce hook within 1e-6 of gloo's."""

import numpy as np
import pytest
import torch

import bagua
import bagua.torch as bt

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")


def test_collectives_on_the_current_stream(comm):
    n = comm.size
    x = torch.arange(1 << 20, device="cuda", dtype=torch.float32) % 7 * (comm.rank + 1)
    bagua.allreduce(x)
    torch.cuda.current_stream().synchronize()
    expected = torch.arange(1 << 20, device="cuda", dtype=torch.float32) % 7 * (n * (n + 1) / 2)
    assert torch.equal(x, expected)
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):  # ordered on side: the fill before the call, the read after it
        y = torch.empty(4096, device="cuda", dtype=torch.int64)
        y.fill_(comm.rank)
        out = torch.empty(4096 * n, device="cuda", dtype=torch.int64)
        comm.allgather(y, out)
        got = out.cpu()
    assert got.reshape(n, -1).tolist() == [[r] * 4096 for r in range(n)]


def test_a_call_on_another_stream_keeps_its_tensor_from_reuse(comm):
    # The call runs on `side` (a torch.cuda.Stream), not torch's current stream: the binding records the tensor on
    # side (record_stream), so freeing it right after the call does not hand its memory to new work on the current
    # stream while side, held busy by a sleep, has not run the call yet.
    if getattr(torch.cuda, "get_allocator_backend", lambda: "native")() != "native":
        pytest.skip("cudaMallocAsync may reuse the block in stream order")
    side = torch.cuda.Stream()
    x = torch.full((1 << 20,), float(comm.rank + 1), device="cuda")
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        torch.cuda._sleep(200_000_000)  # about 0.1 s of GPU clock cycles
    comm.allreduce(x, stream=side)
    freed = x.data_ptr()
    del x
    y = torch.empty(1 << 20, device="cuda")
    behind = not side.query()
    reused = y.data_ptr() == freed
    side.synchronize()
    if behind:  # (a host descheduled for 0.1 s would leave nothing to check)
        assert not reused
    z = torch.full((1 << 20,), float(comm.rank + 1), device="cuda")
    side.wait_stream(torch.cuda.current_stream())
    comm.allreduce(z, stream=side)
    side.synchronize()
    assert torch.all(z == comm.size * (comm.size + 1) / 2)


def test_host_and_device_in_one_call_is_refused(comm):
    with pytest.raises(bagua.InvalidArgumentError, match="different devices"):
        comm.allreduce(torch.ones(8), torch.ones(8, device="cuda"))


def test_quantized_on_device_within_bound(comm):
    rng = np.random.default_rng(5 + comm.rank)
    x = rng.uniform(-1, 1, 100000).astype(np.float32)
    every = np.zeros(x.size * comm.size, np.float32)
    comm.allgather(x, every)
    exact = every.reshape(comm.size, -1).astype(np.float64).mean(axis=0)
    t = torch.from_numpy(x).cuda()
    comm.quantized_allreduce(t, op=bagua.AVG)
    assert np.abs(t.cpu().numpy() - exact).max() <= 2.1 / 255


def cuda_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8)).cuda()


def run(wrapped, model, rank, steps=50):
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for step in range(steps):
        g = torch.Generator().manual_seed(step * 10 + rank)
        x, y = torch.randn(16, 32, generator=g).cuda(), torch.randint(0, 8, (16,), generator=g).cuda()
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(wrapped(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def test_ddp_on_cuda_matches_gloo(comm, gloo):
    ref_model, our_model = cuda_model(), cuda_model()
    ref = run(torch.nn.parallel.DistributedDataParallel(ref_model), ref_model, comm.rank)
    ddp = bt.DistributedDataParallel(our_model, bt.GradientAllReduce())
    ours = run(ddp, our_model, comm.rank)
    ddp.close()
    rel = np.abs(np.array(ours) - np.array(ref)) / np.abs(np.array(ref))
    assert rel.max() <= 1e-5
    flat = torch.cat([p.detach().reshape(-1) for p in our_model.parameters()])
    everyone = torch.zeros(flat.numel() * comm.size, device="cuda")
    comm.allgather(flat, everyone)
    assert all(torch.equal(flat, row) for row in everyone.reshape(comm.size, -1))


def test_allreduce_comm_hook_on_cuda_matches_gloo(comm, gloo):
    # torch's DDP (gloo) on a CUDA model, its gradients through bagua's hook: the hook's future names the device.
    from bagua.torch import hooks

    ref_model, hooked_model = cuda_model(), cuda_model()
    ref = run(torch.nn.parallel.DistributedDataParallel(ref_model), ref_model, comm.rank, 20)
    hooked = torch.nn.parallel.DistributedDataParallel(hooked_model)
    hooked.register_comm_hook(hooks.HookState(comm), hooks.allreduce)
    ours = run(hooked, hooked_model, comm.rank, 20)
    rel = np.abs(np.array(ours) - np.array(ref)) / np.abs(np.array(ref))
    assert rel.max() <= 1e-5
    for a, b in zip(ref_model.parameters(), hooked_model.parameters()):
        assert torch.allclose(a, b, rtol=0, atol=1e-6)


@pytest.mark.parametrize("algorithm", [bt.ByteGrad(), bt.Decentralized(), bt.LowPrecisionDecentralized()])
def test_other_algorithms_train_on_cuda(comm, algorithm):
    model = cuda_model()
    ddp = bt.DistributedDataParallel(model, algorithm)
    losses = run(ddp, model, comm.rank, 40)
    ddp.close()
    assert all(np.isfinite(losses)) and sum(losses[-5:]) < sum(losses[:5])

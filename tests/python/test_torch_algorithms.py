"""Every bagua.torch algorithm trains a small model for a few dozen steps on 1-4 ranks: the loss falls and stays
finite; gradient algorithms leave bitwise identical parameters on every rank; weight algorithms and
asynchronous averaging leave every rank with the same model after close() and one exact average. Accuracy on
real data against full precision is the job of examples/python/train_digits.py --check (ctest
python_train_digits_4)."""

import pytest
import torch

import bagua
import bagua.torch as bt

torch.set_num_threads(1)


def model():
    torch.manual_seed(5)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 4))


def batch(step, rank):
    g = torch.Generator().manual_seed(31 * step + rank)
    x = torch.randn(32, 16, generator=g)
    return x, (x[:, :4].sum(1) > 0).long() + 2 * (x[:, 4:8].sum(1) > 0).long()


def same_everywhere(comm, net):
    flat = torch.cat([p.detach().reshape(-1) for p in net.parameters()])
    everyone = torch.zeros(flat.numel() * comm.size)
    comm.allgather(flat, everyone)
    return all(torch.equal(flat, row) for row in everyone.reshape(comm.size, -1))


ALGORITHMS = ["gradient_allreduce", "bytegrad", "qadam", "onebit_adam", "decentralized",
              "low_precision_decentralized", "async"]


@pytest.mark.parametrize("name", ALGORITHMS)
def test_algorithm_trains(comm, name):
    net = model()
    if name in ("qadam", "onebit_adam"):
        opt = bt.QAdamOptimizer(net.parameters(), lr=0.01, warmup_steps=10)
        algorithm = bt.QAdam(opt) if name == "qadam" else bt.OneBitAdam(opt)
    else:
        opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
        algorithm = {"gradient_allreduce": bt.GradientAllReduce(), "bytegrad": bt.ByteGrad(),
                     "decentralized": bt.Decentralized(), "low_precision_decentralized": bt.LowPrecisionDecentralized(),
                     "async": bt.AsyncModelAverage(interval_ms=1)}[name]
    ddp = bt.DistributedDataParallel(net, algorithm, optimizers=[opt])
    losses = []
    for step in range(40):
        x, y = batch(step, comm.rank)
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(ddp(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    ddp.close()
    assert all(torch.isfinite(torch.tensor(losses)))
    assert sum(losses[-5:]) < 0.8 * sum(losses[:5]), losses
    if algorithm.kind == "weights":
        with torch.no_grad():
            for p in net.parameters():
                comm.allreduce(p.data, op=bagua.AVG)
    assert same_everywhere(comm, net)
    if algorithm.kind != "async":
        assert ddp.scheduler_info() is None  # closed


def test_async_needs_the_optimizers(comm):
    with pytest.raises(ValueError, match="optimizers"):
        bt.DistributedDataParallel(model(), bt.AsyncModelAverage())


def test_async_optimizer_takes_a_learning_rate_scheduler(comm):
    # AsyncModelAverage wraps opt.step; torch's schedulers wrap it again and need a bound method (__self__, __func__).
    net = model()
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    ddp = bt.DistributedDataParallel(net, bt.AsyncModelAverage(interval_ms=1), optimizers=[opt])
    try:
        scheduler = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
        for step in range(4):
            x, y = batch(step, comm.rank)
            opt.zero_grad()
            torch.nn.functional.cross_entropy(ddp(x), y).backward()
            opt.step()
            scheduler.step()
        assert opt.param_groups[0]["lr"] == pytest.approx(0.025)
    finally:
        ddp.close()


def test_qadam_step_runs_a_closure(comm):
    # As torch's optimizers do: the closure's backward runs with gradients enabled inside step().
    net = model()
    opt = bt.QAdamOptimizer(net.parameters(), lr=0.01, warmup_steps=10)
    x, y = batch(0, comm.rank)
    before = [p.detach().clone() for p in net.parameters()]

    def closure():
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(net(x), y)
        loss.backward()
        return loss

    loss = opt.step(closure)
    assert torch.isfinite(loss)
    assert any(not torch.equal(b, p) for b, p in zip(before, net.parameters()))

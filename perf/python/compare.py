"""Communication time per step of bagua.torch DistributedDataParallel (GradientAllReduce) against torch DDP over
gloo, on the same model, seed and batches, under one launcher (bagua-run or torchrun):

    build/bin/bagua-run -n 4 python3 perf/python/compare.py --model digits|mlp25m [--steps N]
    build/bin/bagua-run -n 4 python3 perf/python/compare.py --model bert6 --scheduler-only

A step is zero_grad, forward, backward, optimizer step; its time is the slowest rank's. The communication time
per step is the median step time minus the median time of the same step on the bare model (no wrapper) in the
same run. --scheduler-only drives bagua.Scheduler directly with bagua_bucket_perf's tensors (BERT-base's shapes
scaled by 1/6, 4 MiB buckets, every tensor marked after backward), for comparison with that C++ tool's
"no-overlap" row at --ns-per-param 0 (perf/python/compare.sh runs both alternately).
"""

import argparse
import statistics
import sys
import time

import torch
import torch.distributed as dist

import bagua
import bagua.torch as bt

torch.set_num_threads(1)


def mlp(sizes):
    layers = []
    for a, b in zip(sizes, sizes[1:]):
        layers += [torch.nn.Linear(a, b), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers[:-1])


MODELS = {
    "digits": (lambda: mlp([64, 128, 64, 10]), 16, 64),  # the example's model: (factory, batch per rank, input)
    "mlp25m": (lambda: mlp([1024, 4096, 4096, 1024, 10]), 4, 1024),  # 25.2M parameters
}


def bert_counts(scale=1 / 6):
    d = lambda x: max(1, round(x * scale))
    h, ff, vocab, positions = d(768), d(3072), d(30522), d(512)
    counts = [h * h, h]
    for _ in range(12):
        counts += [h, h, ff * h, h, h * ff, ff, h, h, h * h, h, h * h, h, h * h, h, h * h, h]
    return counts + [h, h, 2 * h, positions * h, vocab * h]


def slowest(comm, seconds):
    t = torch.tensor([seconds], dtype=torch.float64)
    comm.allreduce(t, op=bagua.MAX)
    return t.item()


def timed_steps(comm, step, steps, warmup=3):
    for _ in range(warmup):
        step()
    times = []
    for _ in range(steps):
        comm.barrier()
        start = time.perf_counter()
        step()
        times.append(slowest(comm, time.perf_counter() - start))
    return statistics.median(times)


def train_step(model, wrapped, batch, features):
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(batch, features, generator=torch.Generator().manual_seed(0))
    y = torch.zeros(batch, dtype=torch.long)

    def step():
        opt.zero_grad()
        torch.nn.functional.cross_entropy(wrapped(x), y).backward()
        opt.step()

    return step


def compare_ddp(comm, args):
    factory, batch, features = MODELS[args.model]
    bt.init_process_group("gloo", comm)
    rows = {}
    for round_ in range(args.rounds):  # alternate, so that the noise of a shared machine hits both alike
        for name in ("bare", "torch DDP (gloo)", "bagua DDP"):
            torch.manual_seed(0)
            model = factory()
            if name == "bare":
                wrapped = model
            elif name == "torch DDP (gloo)":
                wrapped = torch.nn.parallel.DistributedDataParallel(model)
            else:
                wrapped = bt.DistributedDataParallel(model, bt.GradientAllReduce(), bucket_bytes=4 << 20,
                                                     autotune=False)
            rows.setdefault(name, []).append(timed_steps(comm, train_step(model, wrapped, batch, features),
                                                         args.steps))
            if isinstance(wrapped, bt.DistributedDataParallel):
                wrapped.close()
    dist.destroy_process_group()
    params = sum(p.numel() for p in factory().parameters())
    if comm.rank == 0:
        bare = statistics.median(rows["bare"])
        comm_ms = {n: 1e3 * (statistics.median(v) - bare) for n, v in rows.items()}
        print(f"# {args.model}: {params / 1e6:.2f}M parameters, {comm.size} ranks, batch {batch} per rank, "
              f"medians of {args.rounds} rounds x {args.steps} steps")
        print("| wrapper | step ms | communication ms/step |")
        print("|---|---|---|")
        for n, v in rows.items():
            print(f"| {n} | {1e3 * statistics.median(v):.2f} | {comm_ms[n]:.2f} |" if n != "bare" else
                  f"| {n} | {1e3 * statistics.median(v):.2f} | - |")
        print(f"gloo / bagua communication time: {comm_ms['torch DDP (gloo)'] / max(comm_ms['bagua DDP'], 1e-9):.2f}x")


def scheduler_only(comm, args):
    counts = bert_counts()
    grads = [torch.ones(c) for c in counts]
    sched = bagua.Scheduler(comm, bagua.BucketAlgorithm.ALLREDUCE, op=bagua.AVG, bucket_bytes=4 << 20,
                            autotune=False)
    sched.register(grads)

    def backward():
        for g in grads:  # what bagua_bucket_perf's backward writes at --ns-per-param 0
            g[::1024] = 1.0

    def step():
        backward()
        for i in range(len(grads)):
            sched.mark_ready(i)
        sched.wait()

    step_s = timed_steps(comm, step, args.steps, warmup=1)
    compute_s = timed_steps(comm, backward, args.steps, warmup=1)
    sched.close()
    if comm.rank == 0:
        print(f"python scheduler no-overlap step_ms {1e3 * step_s:.2f} compute_ms {1e3 * compute_s:.2f} "
              f"communication_ms {1e3 * (step_s - compute_s):.2f}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="digits", choices=sorted(MODELS) + ["bert6"])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--scheduler-only", action="store_true")
    args = parser.parse_args()
    comm = bagua.init()
    if args.scheduler_only:
        scheduler_only(comm, args)
    else:
        compare_ddp(comm, args)
    bagua.destroy()


if __name__ == "__main__":
    sys.exit(main())

"""Trains one MLP on the handwritten digits Debian ships with scikit-learn (1797 8x8 images, 10 classes) with
torch DDP over gloo and with each bagua.torch algorithm, same seed and same shards, and prints a table.

    build/bin/bagua-run -n 4 python3 examples/python/train_digits.py [--epochs N] [--check]

--check exits 1 unless every algorithm ends within 1 accuracy point of its full-precision reference
(GradientAllReduce for the SGD algorithms, Adam over gloo for QAdam and 1-bit Adam), async within 2: its averaging
runs on a timer, so its result varies from run to run (a point is under 4 of the 357 test images), as the C++
trainer's check allows.
"""

import argparse
import gzip
import importlib.util
import os
import sys
import time

import numpy as np
import torch
import torch.distributed as dist

import bagua
import bagua.torch as bt

torch.set_num_threads(1)


def load_digits():
    spec = importlib.util.find_spec("sklearn")
    if spec is None:
        sys.exit("train_digits: the digits set comes with scikit-learn (apt install python3-sklearn)")
    path = os.path.join(os.path.dirname(spec.origin), "datasets", "data", "digits.csv.gz")
    with gzip.open(path, "rt") as f:
        data = np.loadtxt(f, delimiter=",", dtype=np.float32)
    x, y = torch.from_numpy(data[:, :-1] / 16.0), torch.from_numpy(data[:, -1].astype(np.int64))
    order = torch.randperm(len(y), generator=torch.Generator().manual_seed(0))
    x, y = x[order], y[order]
    return (x[:1440], y[:1440]), (x[1440:], y[1440:])


def make_model():
    torch.manual_seed(42)
    return torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 64), torch.nn.ReLU(),
                               torch.nn.Linear(64, 10))


def run(name, comm, train, test, args):
    model = make_model()
    adam = name in ("adam (torch DDP, gloo)", "qadam", "onebit_adam")
    lr = args.adam_lr if adam else args.lr
    if name.startswith("sgd (torch") or name.startswith("adam (torch"):
        wrapped = torch.nn.parallel.DistributedDataParallel(model)
        opt = (torch.optim.Adam if adam else torch.optim.SGD)(wrapped.parameters(), lr=lr,
                                                              **({} if adam else {"momentum": 0.9}))
    elif name in ("qadam", "onebit_adam"):
        opt = bt.QAdamOptimizer(model.parameters(), lr=lr, warmup_steps=args.warmup)
        algorithm = bt.QAdam(opt) if name == "qadam" else bt.OneBitAdam(opt)
        wrapped = bt.DistributedDataParallel(model, algorithm)
    else:
        opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
        algorithm = {"gradient_allreduce": bt.GradientAllReduce(), "bytegrad": bt.ByteGrad(),
                     "decentralized": bt.Decentralized(), "low_precision_decentralized": bt.LowPrecisionDecentralized(),
                     "async": bt.AsyncModelAverage(interval_ms=2)}[name]
        wrapped = bt.DistributedDataParallel(model, algorithm, optimizers=[opt])
    x, y = train
    per_rank = args.batch // comm.size
    steps = len(y) // args.batch
    start = time.perf_counter()
    loss = torch.zeros(1)
    for epoch in range(args.epochs):
        order = torch.randperm(len(y), generator=torch.Generator().manual_seed(epoch))
        for step in range(steps):
            index = order[step * args.batch + comm.rank * per_rank:step * args.batch + (comm.rank + 1) * per_rank]
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(wrapped(x[index]), y[index])
            loss.backward()
            opt.step()
    seconds = time.perf_counter() - start
    if isinstance(wrapped, bt.DistributedDataParallel):
        wrapped.close()  # async: stop averaging and take the exact average
        if name in ("decentralized", "low_precision_decentralized"):
            with torch.no_grad():  # weight algorithms: report the average model, as is usual
                for p in model.parameters():
                    comm.allreduce(p.data, op=bagua.AVG)
    with torch.no_grad():
        accuracy = (model(test[0]).argmax(1) == test[1]).float().mean().item()
    final = loss.detach().reshape(1).clone()
    comm.allreduce(final, op=bagua.AVG)
    acc = torch.tensor([accuracy])
    comm.allreduce(acc, op=bagua.AVG)
    return final.item(), acc.item(), 1e3 * seconds / (steps * args.epochs)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--batch", type=int, default=64, help="global batch, split across ranks")
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--adam-lr", type=float, default=0.002)
    parser.add_argument("--warmup", type=int, default=100)
    parser.add_argument("--check", action="store_true")
    parser.add_argument("--only", nargs="*")
    args = parser.parse_args()
    # The model is small (about 68 KB of gradients). Below 1 MiB the library sends quantized allreduces at full
    # precision, which is faster there but would hide the compression this example is about.
    os.environ.setdefault("BAGUA_QUANTIZED_MIN_BYTES", "0")
    comm = bagua.init()
    bt.init_process_group("gloo", comm)  # torch DDP's reference runs over gloo
    train, test = load_digits()
    names = ["sgd (torch DDP, gloo)", "gradient_allreduce", "bytegrad", "decentralized",
             "low_precision_decentralized", "async", "adam (torch DDP, gloo)", "qadam", "onebit_adam"]
    results = {}
    for name in names:
        if args.only and name not in args.only and not name.startswith(("sgd (torch", "adam (torch")):
            continue
        results[name] = run(name, comm, train, test, args)
    failed = []
    if comm.rank == 0:
        print(f"# train_digits: {comm.size} ranks, {args.epochs} epochs, global batch {args.batch}")
        print(f"| algorithm | final loss | test accuracy | ms/step |")
        print("|---|---|---|---|")
        for name, (loss, acc, ms) in results.items():
            print(f"| {name} | {loss:.4f} | {100 * acc:.2f}% | {ms:.2f} |")
    reference_sgd = results["gradient_allreduce"][1] if "gradient_allreduce" in results else \
        results["sgd (torch DDP, gloo)"][1]
    for name, (_, acc, _) in results.items():
        reference = results["adam (torch DDP, gloo)"][1] if name in ("qadam", "onebit_adam") else reference_sgd
        tolerance = 0.02 if name == "async" else 0.01
        if acc < reference - tolerance:
            failed.append(f"{name}: {100 * acc:.2f}% against {100 * reference:.2f}%")
    dist.destroy_process_group()
    bagua.destroy()
    if args.check and failed:
        if comm.rank == 0:
            print("train_digits: below the reference by more than the tolerance:", "; ".join(failed))
        sys.exit(1)


if __name__ == "__main__":
    main()

#!/bin/bash
# On the GPU machine: allreduce on CUDA tensors, 2 ranks sharing the one GPU, bagua against what a user picks when
# NCCL refuses two ranks on one GPU: torch.distributed with the gloo backend, from the machine's own PyTorch. Also
# records NCCL's refusal. Float sum, in place, 4 KiB to 256 MiB, 5 warm-up and 20 timed iterations per size.
#   perf/gpu/compare.sh [build-dir]        (run by scripts/gpu-check.sh; needs python3 with torch)
set -uo pipefail
BUILD=${1:-build}
NP=2
echo "== bagua, -M device"
"$BUILD/bin/bagua-run" -n $NP "$BUILD/bin/bagua_allreduce_perf" -M device -b 4K -e 256M -f 4 -n 20 -w 5
python3 - <<'PY'
import os, sys, time
try:
    import torch, torch.distributed as dist, torch.multiprocessing as mp
except ImportError as e:
    print(f"== torch not available: {e}")
    sys.exit(0)

def run(rank, backend, port, out):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.cuda.set_device(0)
    try:
        dist.init_process_group(backend, rank=rank, world_size=2)
        size = 4096
        while size <= 256 << 20:
            x = torch.ones(size // 4, device="cuda")
            for _ in range(5):
                dist.all_reduce(x)
            torch.cuda.synchronize()
            dist.barrier()
            start = time.perf_counter()
            for _ in range(20):
                dist.all_reduce(x)
            torch.cuda.synchronize()
            us = (time.perf_counter() - start) / 20 * 1e6
            if rank == 0:
                out.put(f"{size:>10} {us:10.1f} us {size / us / 1e3:8.3f} GB/s busbw {size / us / 1e3:8.3f}")
            size *= 4
        dist.destroy_process_group()
    except Exception as e:  # NCCL: "Duplicate GPU detected"
        if rank == 0:
            out.put(f"failed: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else e}")

for backend, port in (("gloo", 29611), ("nccl", 29612)):
    print(f"== torch {torch.__version__} {backend} on CUDA tensors, 2 ranks sharing GPU 0 (busbw = algbw for 2 ranks)")
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=run, args=(r, backend, port, out)) for r in range(2)]
    for p in procs: p.start()
    for p in procs: p.join(timeout=240)
    for p in procs:
        if p.is_alive(): p.kill()
    while not out.empty():
        print(out.get())
PY

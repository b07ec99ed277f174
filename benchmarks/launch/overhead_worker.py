"""One training job for overhead.py (and launch_bench.py): the distrain loop or a plain DDP loop.

Same model, data and seeds either way; rank 0 prints one JSON line with the mean step time
(after warm-up).  With BENCH_FIRST_STEP_FILE set, every rank appends "rank restart_count time"
after its first finished step (as plain_ddp.py does; first_step.py reads it).
"""

import argparse
import json
import os
import time

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import TensorDataset

p = argparse.ArgumentParser()
p.add_argument("--impl", choices=["distrain", "ddp"], required=True)
p.add_argument("--model", choices=["digits", "large"], default="digits")
p.add_argument("--steps", type=int, default=60)
p.add_argument("--warmup", type=int, default=10)
p.add_argument("--batch-size", type=int, default=64)
args = p.parse_args()


def make_model() -> nn.Module:
    width = 32 if args.model == "digits" else 96
    return nn.Sequential(
        nn.Conv2d(1, width, 3, padding=1),
        nn.BatchNorm2d(width),
        nn.ReLU(),
        nn.Conv2d(width, 2 * width, 3, padding=1),
        nn.BatchNorm2d(2 * width),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(2 * width * 4 * 4, 128),
        nn.ReLU(),
        nn.Linear(128, 10),
    )


g = torch.Generator().manual_seed(0)
data = TensorDataset(
    torch.rand(4096, 1, 8, 8, generator=g), torch.randint(0, 10, (4096,), generator=g)
)
torch.manual_seed(0)

if args.impl == "distrain":
    import distrain

    ctx = distrain.init(verbose=False)
    model = ctx.prepare_model(make_model())
    loader = ctx.prepare_loader(data, batch_size=args.batch_size, seed=0)
    rank = ctx.rank
else:
    import torch.distributed as dist
    from torch.utils.data import DataLoader, DistributedSampler

    dist.init_process_group("gloo")
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    model = nn.parallel.DistributedDataParallel(make_model())
    sampler = DistributedSampler(data, seed=0)
    loader = DataLoader(data, batch_size=args.batch_size, sampler=sampler)
    rank = dist.get_rank()

opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
times: list[float] = []
step, epoch = 0, 0
while step < args.steps:
    if args.impl == "ddp":
        sampler.set_epoch(epoch)
    for xb, yb in loader:
        t0 = time.perf_counter()
        loss = F.cross_entropy(model(xb), yb)
        opt.zero_grad(set_to_none=True)
        if args.impl == "distrain":
            ctx.backward(loss)
            ctx.step(opt)
        else:
            loss.backward()
            opt.step()
        times.append(time.perf_counter() - t0)
        step += 1
        if step == 1 and os.environ.get("BENCH_FIRST_STEP_FILE"):
            with open(os.environ["BENCH_FIRST_STEP_FILE"], "a") as f:
                f.write(
                    f"{rank} {os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')} {time.time()}\n"
                )
        if step == args.steps:
            break
    epoch += 1

if rank == 0:
    steady = times[args.warmup :]
    print(
        json.dumps({"impl": args.impl, "model": args.model, "step_s": sum(steady) / len(steady)}),
        flush=True,
    )
if args.impl == "distrain":
    ctx.shutdown()
else:
    del model
    dist.destroy_process_group()

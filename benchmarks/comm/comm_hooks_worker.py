"""One throughput measurement for comm_hooks_bench.py: tiny MLP or the digits CNN.

distrain run -n 2 benchmarks/comm/comm_hooks_worker.py --model mlp --hook bf16 --out r.json
python benchmarks/comm/comm_hooks_worker.py --model mlp --out r.json     # the 1-process baseline
"""

import argparse
import json
import time

import torch
import torch.nn.functional as F
from torch import nn

import distrain

p = argparse.ArgumentParser()
p.add_argument("--model", choices=["mlp", "cnn"], required=True)
p.add_argument("--hook", default="none")
p.add_argument("--bucket-cap-mb", type=float, default=25.0)
p.add_argument("--warmup", type=int, default=15)
p.add_argument("--steps", type=int, default=80)
p.add_argument("--out", required=True)
args = p.parse_args()

ctx = distrain.init(
    threads=1, verbose=False
)  # one thread per process: the fair per-"device" baseline
torch.manual_seed(0)
if args.model == "mlp":
    net = nn.Sequential(
        nn.Flatten(),
        nn.Linear(784, 512),
        nn.ReLU(),
        nn.Linear(512, 512),
        nn.ReLU(),
        nn.Linear(512, 10),
    )
    shape, batch = (1, 28, 28), 64
else:
    net = nn.Sequential(
        nn.Conv2d(1, 32, 3, padding=1),
        nn.BatchNorm2d(32),
        nn.ReLU(),
        nn.Conv2d(32, 64, 3, padding=1),
        nn.BatchNorm2d(64),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(64 * 4 * 4, 128),
        nn.ReLU(),
        nn.Linear(128, 10),
    )
    shape, batch = (1, 8, 8), 32
model = ctx.prepare_model(
    net, comm_hook=None if args.hook == "none" else args.hook, bucket_cap_mb=args.bucket_cap_mb
)
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
gen = torch.Generator().manual_seed(ctx.rank)
xs = torch.randn(8, batch, *shape, generator=gen)
ys = torch.randint(0, 10, (8, batch), generator=gen)


def step(i: int) -> None:
    loss = F.cross_entropy(model(xs[i % 8]), ys[i % 8])
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()


for i in range(args.warmup):
    step(i)
ctx.barrier()
t = time.perf_counter()
for i in range(args.steps):
    step(i)
ctx.barrier()
elapsed = time.perf_counter() - t
if ctx.is_main:
    with open(args.out, "w") as f:
        json.dump(
            {
                "samples_per_s": args.steps * batch * ctx.world_size / elapsed,
                "params": sum(p.numel() for p in net.parameters()),
            },
            f,
        )
ctx.shutdown()

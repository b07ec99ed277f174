"""One run for links_hooks.py: an ~11 M-parameter model on the digits, one DDP comm hook.

    distrain run --nnodes 2 --node-rank K ... benchmarks/comm/links_hooks_worker.py \
        --model mlp --hook powersgd:rank=2 --out r.json

Data: scikit-learn's digits (1797 8x8 images, no download), a fixed 1437/360 split, upsampled
to 32x32.  `--model mlp`: 1024-2048-2048-2048-10 (10.5 M parameters); `--model resnet18`:
torchvision's ResNet-18 (11.2 M) on the images as 3 channels.  SGD with momentum, each rank
takes every world-th sample of a shared per-epoch shuffle.  Steps after the first 15 are timed
(PowerSGD compresses from step 10).  Rank 0 writes samples/s, ms/step and the test accuracy.
For PowerSGD on gloo distrain puts the whole model in one bucket (see parallel/comm_hooks.py).
"""

import argparse
import json
import time

import torch
import torch.nn.functional as F
import torchvision
from sklearn.datasets import load_digits
from torch import nn

import distrain

p = argparse.ArgumentParser()
p.add_argument("--model", choices=["mlp", "resnet18"], default="mlp")
p.add_argument("--hook", default="none")
p.add_argument("--epochs", type=int, default=3)
p.add_argument("--image-size", type=int, default=32, help="digits are 8x8; upsampled to this")
p.add_argument("--batch-size", type=int, default=16, help="per rank")
p.add_argument("--lr", type=float, default=0.02)
p.add_argument("--warmup", type=int, default=15)
p.add_argument("--bucket-cap-mb", type=float, default=25.0)
p.add_argument("--out", required=True)
args = p.parse_args()

ctx = distrain.init(threads=1, verbose=False)
torch.manual_seed(0)
digits = load_digits()
images = F.interpolate(
    torch.tensor(digits.images, dtype=torch.float32)[:, None] / 16.0,
    size=args.image_size,
    mode="bilinear",
    align_corners=False,
)
labels = torch.tensor(digits.target)
order = torch.randperm(len(labels), generator=torch.Generator().manual_seed(0))
train, test = order[:1437], order[1437:]
if args.model == "mlp":
    net: nn.Module = nn.Sequential(
        nn.Flatten(),
        nn.Linear(args.image_size**2, 2048),
        nn.ReLU(),
        nn.Linear(2048, 2048),
        nn.ReLU(),
        nn.Linear(2048, 2048),
        nn.ReLU(),
        nn.Linear(2048, 10),
    )
else:
    images = images.repeat(1, 3, 1, 1)
    net = torchvision.models.resnet18(num_classes=10)
model = ctx.prepare_model(
    net, comm_hook=None if args.hook == "none" else args.hook, bucket_cap_mb=args.bucket_cap_mb
)
opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)

step, timed_steps, timed_s = 0, 0, 0.0
for epoch in range(args.epochs):
    model.train()
    shuffled = train[torch.randperm(len(train), generator=torch.Generator().manual_seed(epoch))]
    mine = shuffled[ctx.rank :: ctx.world_size]
    for i in range(0, len(mine) - args.batch_size + 1, args.batch_size):
        batch = mine[i : i + args.batch_size]
        start = time.perf_counter()
        loss = F.cross_entropy(model(images[batch]), labels[batch])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        step += 1
        if step > args.warmup:
            timed_steps, timed_s = timed_steps + 1, timed_s + time.perf_counter() - start
if ctx.is_main:
    net.eval()
    with torch.no_grad():
        acc = (net(images[test]).argmax(1) == labels[test]).float().mean().item()
    with open(args.out, "w") as f:
        json.dump(
            {
                "samples_per_s": timed_steps * args.batch_size * ctx.world_size / timed_s,
                "step_ms": 1e3 * timed_s / timed_steps,
                "test_acc": acc,
                "steps": step,
                "params": sum(p.numel() for p in net.parameters()),
            },
            f,
        )
ctx.shutdown()

"""Worker for replicas.py: a plain distrain script (no TorchFT code) that logs every step it keeps.

It runs unchanged under ``distrain run --replicas 2 -n 1``, ``distrain run -n 2`` and torchrun.
Rank 0 of each replica group (group 0 without ``--replicas``) appends one line per committed step
to ``--steplog``.<group>: "wall_time step pid participants groups"; every process writes its pid to
``--steplog``.pid.<group>.<rank> when it starts, so the driver can aim a SIGKILL.  The model is a
small MLP on fixed random data; ``--every`` saves a checkpoint (every variant resumes from it).
"""

import argparse
import os
import time

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import TensorDataset

import distrain

p = argparse.ArgumentParser()
p.add_argument("--steplog", required=True, help="path prefix of the step logs and pid files")
p.add_argument("--ckpt", required=True, help="checkpoint directory")
p.add_argument("--steps", type=int, default=10**7)
p.add_argument("--every", type=int, default=20, help="checkpoint every N steps")
p.add_argument("--hidden", type=int, default=512)
p.add_argument("--batch", type=int, default=64)
args = p.parse_args()

group = int(os.environ.get("DISTRAIN_REPLICA_GROUP", "0"))  # only to name the outputs
groups = int(os.environ.get("DISTRAIN_REPLICA_GROUPS", "1"))
ctx = distrain.init(verbose=False)
with open(f"{args.steplog}.pid.{group}.{ctx.rank}", "w") as f:
    f.write(str(os.getpid()))

g = torch.Generator().manual_seed(0)
x = torch.randn(16384, 64, generator=g)
y = (x[:, :8].sum(1) * 2).long().clamp(-5, 4) + 5
net = nn.Sequential(
    nn.Linear(64, args.hidden),
    nn.ReLU(),
    nn.Linear(args.hidden, args.hidden),
    nn.ReLU(),
    nn.Linear(args.hidden, 10),
)
model = ctx.prepare_model(net)
loader = ctx.prepare_loader(TensorDataset(x, y), batch_size=args.batch, seed=1)
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
ckpt = ctx.checkpointer(args.ckpt, every_steps=args.every)
step = ckpt.restore(model=model, optimizer=opt, loader=loader).step
log = open(f"{args.steplog}.{group}", "a", buffering=1) if ctx.rank == 0 else None

while step < args.steps:
    for xb, yb in loader:
        loss = F.cross_entropy(model(xb), yb)
        opt.zero_grad()
        loss.backward()
        if ctx.step(opt):
            step += 1
            if log is not None:
                groups = getattr(ctx.layer, "replicas", None)  # --replicas: this process's group
                live = groups.manager.num_participants() if groups is not None else 1
                log.write(f"{time.time():.4f} {step} {os.getpid()} {live} {groups}\n")
        ckpt.maybe_save(step)
        if step >= args.steps:
            break
ctx.shutdown()

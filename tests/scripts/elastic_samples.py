"""An elastic job with a fixed per-process batch that logs every sample it trains on.

``--batch-size`` is per process, as every tutorial writes it: the global batch follows the
world size (``--global-batch`` keeps it instead, through accumulation).  After each optimizer
step rank 0 appends to ``--samples-log`` the samples every rank trained on in that step (an
all-gather of the indices the loader really handed out), and one header line per (re)start
with the step it resumed from: tests/helpers/samples.py rebuilds from it what the job trained on.
"""

import argparse
import hashlib
import json
import os
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.utils.data import TensorDataset

import distrain

p = argparse.ArgumentParser()
p.add_argument("--dir", required=True)
p.add_argument("--samples-log", required=True)
p.add_argument("--batch-size", type=int, default=4)
p.add_argument("--global-batch", type=int, default=None)
p.add_argument("--samples", type=int, default=240)
p.add_argument("--epochs", type=int, default=2)
p.add_argument("--every", type=int, default=2)
p.add_argument("--step-sleep", type=float, default=0.2)
p.add_argument("--memory-every", type=int, default=0, help="memory snapshots every K steps")
p.add_argument("--momentum", type=float, default=0.0)
args = p.parse_args()


def record(line: dict) -> None:
    """One whole JSON line, one O_APPEND write: a kill never leaves half of it."""
    fd = os.open(args.samples_log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (json.dumps(line) + "\n").encode())
    finally:
        os.close(fd)


def state_digest() -> str:
    """sha256 of the parameters and the optimizer's momentum: what a resume must give back."""
    h = hashlib.sha256()
    for t in [*model.parameters(), *(v for s in opt.state.values() for v in s.values())]:
        if isinstance(t, torch.Tensor):
            h.update(t.detach().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


os.makedirs(os.path.dirname(os.path.abspath(args.samples_log)), exist_ok=True)
ctx = distrain.init(verbose=False)
g = torch.Generator().manual_seed(7)
x = torch.randn(args.samples, 16, generator=g)
y = (x[:, :4].sum(1) > 0).long()
torch.manual_seed(0)
model = ctx.prepare_model(nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 2)))
data = TensorDataset(x, y, torch.arange(args.samples))
loader = ctx.prepare_loader(
    data, batch_size=args.batch_size, seed=3, global_batch=args.global_batch
)
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=args.momentum)
ckpt = ctx.checkpointer(args.dir, every_steps=args.every, memory_every_steps=args.memory_every)
step = ckpt.restore(model=model, optimizer=opt, loader=loader).step
gbs = loader.global_sampler.global_batch_size
states = [state_digest()] * ctx.world_size  # every rank's, after the restore
if ctx.world_size > 1:
    dist.all_gather_object(states, states[0])
if ctx.is_main:
    record({"resumed": step, "world": ctx.world_size, "global_batch": gbs, "states": states})
for _epoch in range(loader.epoch, args.epochs):
    mine: list[int] = []
    for xb, yb, ib in loader:
        with ctx.accumulate(model, loader.micro_step, loader.accumulation):
            loss = F.cross_entropy(model(xb.to(ctx.device)), yb.to(ctx.device))
            (loss / loader.accumulation).backward()
        mine += ib.tolist()
        if not loader.step_boundary:
            continue
        opt.step()
        opt.zero_grad(set_to_none=True)
        step += 1
        everyone: list = [None] * ctx.world_size
        if ctx.world_size > 1:
            dist.all_gather_object(everyone, mine)
        else:
            everyone = [mine]
        if ctx.is_main:
            trained = [i for rank in everyone for i in rank]
            record(
                {
                    "step": step,
                    "epoch": loader.epoch,
                    "global_batch": gbs,
                    "samples": trained,
                    "state": state_digest(),
                }
            )
        mine = []
        time.sleep(args.step_sleep)  # slow enough for the test to change membership mid-epoch
        ckpt.maybe_save(step)
ckpt.save(step)
ckpt.close()
if ctx.is_main:
    print(f"finished at step {step} on {ctx.world_size} rank(s)", flush=True)
ctx.shutdown()

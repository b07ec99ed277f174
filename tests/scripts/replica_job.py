"""Test-only training script for the --replicas tests: a normal distrain script, no TorchFT code.

It records what the tests check, in --out: ``starts`` gets one line per start of the script
("pid group rank"), and each process writes ``final.<group>.<rank>.json`` (its pid, last step,
a hash of its parameters) when it ends.  ``--kill-at K --kill-group G``: on its first attempt,
rank 0 of replica group G SIGKILLs itself right after step K (the group is read from the
environment only to aim the fault and name the outputs).
"""

import argparse
import hashlib
import json
import os
import signal
import time

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import TensorDataset

import distrain

p = argparse.ArgumentParser()
p.add_argument("--out", required=True)
p.add_argument("--dir", required=True, help="checkpoint directory")
p.add_argument("--steps", type=int, default=60)
p.add_argument("--every", type=int, default=0, help="save a checkpoint every N steps")
p.add_argument("--step-sleep", type=float, default=0.05)
p.add_argument("--kill-at", type=int, default=-1)
p.add_argument("--kill-group", type=int, default=1)
args = p.parse_args()

group = int(os.environ.get("DISTRAIN_REPLICA_GROUP", "0"))
ctx = distrain.init(verbose=False)
with open(os.path.join(args.out, "starts"), "a") as f:
    f.write(f"{os.getpid()} {group} {ctx.rank}\n")

g = torch.Generator().manual_seed(7)
x = torch.randn(4096, 16, generator=g)
y = (x[:, :4].sum(1) > 0).long() + (x[:, 4] > 0).long()
torch.manual_seed(
    group
)  # different initial weights per group: the first quorum must make them equal
model = ctx.prepare_model(nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 3)))
loader = ctx.prepare_loader(TensorDataset(x, y), batch_size=8, seed=3)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
sched = torch.optim.lr_scheduler.StepLR(opt, step_size=10, gamma=0.9)
ckpt = ctx.checkpointer(args.dir, every_steps=args.every)
step = ckpt.restore(model=model, optimizer=opt, scheduler=sched, loader=loader).step
first_attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") == "0"

while step < args.steps:
    for xb, yb in loader:
        loss = F.cross_entropy(model(xb), yb)
        opt.zero_grad()
        loss.backward()
        if ctx.step(opt):  # False when the quorum did not commit this step
            step += 1
            sched.step()
        ckpt.maybe_save(step)
        if first_attempt and step == args.kill_at and group == args.kill_group and ctx.rank == 0:
            os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(args.step_sleep)
        if step >= args.steps:
            break

digest = hashlib.sha256()
for t in ctx.unwrap(model).state_dict().values():
    digest.update(t.detach().cpu().numpy().tobytes())
with open(os.path.join(args.out, f"final.{group}.{ctx.rank}.json"), "w") as f:
    json.dump(
        {
            "pid": os.getpid(),
            "step": step,
            "params": digest.hexdigest(),
            "lr": sched.get_last_lr()[0],
        },
        f,
    )

"""Worker for goodput.py: a plain distrain script that logs every step it reaches.

It runs unchanged under ``distrain run -n 2``, ``distrain run --replicas 2 -n 1`` and torchrun.
Rank 0 of each replica group (group 0 without ``--replicas``; the group is what distrain sets in
``DISTRAIN_REPLICA_GROUP``) appends "wall_time step pid group" to ``--steplog`` after every
committed optimizer step (``ctx.step(opt)``: always True without ``--replicas``) and
"resumed wall_time step group" after restore (a replacement: the step it healed to).  Every
process writes its pid to ``--steplog``.pid.<group>.<rank> when it starts (the driver aims its
SIGKILLs with them; both groups have a rank 0).  An MLP (64-h-h-10, Adam) on fixed random data; disk
checkpoints every ``--every`` steps; ``--memory-every`` adds the memory tier (an int or auto).
``--wait`` makes each step that much longer with the CPU idle, as a GPU step is to the host.
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
p.add_argument("--steplog", required=True, help="path of the step log (pid files beside it)")
p.add_argument("--ckpt", required=True, help="checkpoint directory")
p.add_argument("--steps", type=int, default=10**7)
p.add_argument("--every", type=int, default=100, help="disk checkpoint every N steps")
p.add_argument("--memory-every", default="0", help="memory snapshots every K steps, or auto")
p.add_argument("--hidden", type=int, default=512)
p.add_argument("--batch", type=int, default=128)
p.add_argument(
    "--count-samples", action="store_true", help="also log each step's global samples (.samples)"
)
p.add_argument(
    "--wait", type=float, default=0.0, help="seconds each step waits, as on an accelerator's work"
)
args = p.parse_args()

group = int(os.environ.get("DISTRAIN_REPLICA_GROUP", "0"))  # only to name the outputs
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
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
memory = {} if args.memory_every == "0" else {"memory_every_steps": args.memory_every}
if memory and memory["memory_every_steps"] != "auto":
    memory["memory_every_steps"] = int(args.memory_every)
ckpt = ctx.checkpointer(args.ckpt, every_steps=args.every, **memory)
step = ckpt.restore(model=model, optimizer=opt, loader=loader).step
log = open(args.steplog, "a", buffering=1) if ctx.rank == 0 else None
counting = args.count_samples and log is not None
samples = open(f"{args.steplog}.samples", "a", buffering=1) if counting else None
if log is not None:
    log.write(f"resumed {time.time():.4f} {step} {group}\n")
while step < args.steps:
    for xb, yb in loader:
        loss = F.cross_entropy(model(xb), yb)
        opt.zero_grad()
        loss.backward()
        time.sleep(args.wait)  # the CPU idles while a GPU would compute: a longer step
        if ctx.step(opt):  # not committed (--replicas): the step did not happen
            step += 1
            if log is not None:
                log.write(f"{time.time():.4f} {step} {os.getpid()} {group}\n")
                if samples is not None:  # the world changes with an elastic job's nodes
                    samples.write(f"{time.time():.4f} {step} {ctx.world_size * args.batch}\n")
        ckpt.maybe_save(step)
        if step >= args.steps:
            break
ckpt.close()
ctx.shutdown()

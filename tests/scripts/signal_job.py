"""A job that trains until a test has signalled it: for `kill -USR1` and `--watchdog` tests.

``signal_job.py OUT [--plain] [--steps N]``: each rank writes ``OUT/pid<rank>`` once training
runs, then keeps stepping (at least N steps) until ``OUT/signalled`` exists.  ``--plain`` uses
torch.distributed alone (a script that never imports distrain); otherwise ``distrain.init()``.
"""

import argparse
import os
import time

import torch
import torch.distributed as dist
from torch import nn

p = argparse.ArgumentParser()
p.add_argument("out")
p.add_argument("--plain", action="store_true")
p.add_argument("--steps", type=int, default=20)
args = p.parse_args()

if args.plain:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    model = nn.parallel.DistributedDataParallel(nn.Linear(4, 4))
else:
    import distrain

    ctx = distrain.init()
    rank = ctx.rank
    model = ctx.prepare_model(nn.Linear(4, 4))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
with open(os.path.join(args.out, f"pid{rank}.tmp"), "w") as f:
    f.write(str(os.getpid()))
os.replace(os.path.join(args.out, f"pid{rank}.tmp"), os.path.join(args.out, f"pid{rank}"))  # whole
deadline = time.monotonic() + 120  # the test signals within seconds; never train forever
step = 0


def signalled() -> bool:
    """Whether the test signalled, agreed by every rank (each looking alone, one rank could leave
    the loop a step before the other and leave it alone in the next all-reduce)."""
    seen = torch.tensor([float(os.path.exists(os.path.join(args.out, "signalled")))])
    dist.all_reduce(seen, op=dist.ReduceOp.MIN)
    return bool(seen.item())


while step < args.steps or not signalled():
    loss = model(torch.randn(2, 4)).sum()
    opt.zero_grad()
    loss.backward()
    opt.step()
    step += 1
    time.sleep(0.02)
    if time.monotonic() > deadline:
        raise SystemExit(f"rank {rank}: never signalled")
print(f"rank {rank} done after {step} steps", flush=True)
if args.plain:
    dist.destroy_process_group()
else:
    ctx.shutdown()

"""Test-only: a plain torchrun training script (DDP, opt.step()) that never calls distrain.init().

Under `distrain run --replicas` nothing joins it to the replica groups: it must be refused at its
first optimizer step, never train as independent unreplicated copies.  ``--no-optimizer``: no
optimizer at all (a script that only evaluates), which ends without reporting a final state.
"""

import sys

import torch
import torch.distributed as dist
from torch import nn

dist.init_process_group("gloo")
torch.manual_seed(0)
model = nn.parallel.DistributedDataParallel(nn.Linear(8, 2))
if "--no-optimizer" in sys.argv:
    with torch.no_grad():
        model(torch.randn(4, 8))
    dist.destroy_process_group()
    sys.exit(0)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(20):
    loss = model(torch.randn(4, 8)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(f"step {step} trained unreplicated", flush=True)
dist.destroy_process_group()

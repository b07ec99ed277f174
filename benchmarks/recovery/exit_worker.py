"""exit_tally.py's job: a few DDP steps on gloo, then exit by teardown or by shutdown."""

import sys

import torch
import torch.distributed as dist
from torch import nn

dist.init_process_group("gloo")
model = nn.parallel.DistributedDataParallel(nn.Linear(32, 32))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(5):
    opt.zero_grad()
    model(torch.randn(8, 32)).sum().backward()
    opt.step()
if sys.argv[1] == "shutdown":  # what distrain's Context.shutdown does
    for attr in ("reducer", "logger", "process_group"):
        setattr(model, attr, None)
    dist.destroy_process_group()
# teardown: leave DDP and the group to the interpreter's exit

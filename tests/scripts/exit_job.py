"""Train a few DDP steps and simply end: distrain's exit handler must let the process exit."""

import torch
from torch import nn

import distrain

ctx = distrain.init(verbose=False)
model = ctx.prepare_model(nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1)))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for _ in range(5):
    opt.zero_grad()
    model(torch.randn(8, 32)).sum().backward()
    opt.step()
print("trained", ctx.rank, flush=True)
# no ctx.shutdown(): the interpreter exits with DDP and the gloo group still alive

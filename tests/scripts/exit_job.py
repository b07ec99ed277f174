"""Train a few DDP (or, with argument `fsdp`, sharded) steps and simply end: the exit must not hang."""

import sys

import torch
from torch import nn

import distrain

ctx = distrain.init(verbose=False)
strategy = sys.argv[1] if len(sys.argv) > 1 else "ddp"
model = ctx.prepare_model(nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1)), strategy=strategy)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for _ in range(5):
    opt.zero_grad()
    model(torch.randn(8, 32)).sum().backward()
    opt.step()
print("trained", ctx.rank, flush=True)
# no ctx.shutdown(): the interpreter exits with DDP/FSDP and the gloo group still alive

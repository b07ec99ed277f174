"""Train a few DDP (or, with argument `fsdp`, sharded) steps, checkpointing, and simply end.

    exit_job.py ddp|fsdp CHECKPOINT_DIR

The exit must not hang, and at its very end (after distrain's exit handler) no thread of the
process group may be left (tests/scripts/exit_threads.py): not the model's, not the
checkpointer's own DCP group, not rank 0's store.
"""

import sys

import torch
from exit_threads import report_at_exit
from torch import nn

import distrain

report_at_exit(
    lambda line: print(line, end="", flush=True)
)  # before distrain.init: runs after its shutdown


ctx = distrain.init(verbose=False)
strategy, directory = sys.argv[1], sys.argv[2]
model = ctx.prepare_model(
    nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1)), strategy=strategy
)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
ckpt = ctx.checkpointer(directory, every_steps=2)
step = ckpt.restore(model=model, optimizer=opt).step
while step < 5:
    opt.zero_grad()
    model(torch.randn(8, 32)).sum().backward()
    opt.step()
    step += 1
    ckpt.maybe_save(step)
print("trained", ctx.rank, flush=True)
# no ctx.shutdown(): the interpreter exits with DDP/FSDP, the checkpointer and the group alive

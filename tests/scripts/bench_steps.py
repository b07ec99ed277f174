"""A training loop the size of a test, in the shape `distrain bench scaling` measures.

Each epoch is `--steps` steps of one all-reduce of a 4 KB gradient stand-in (the link between
nodes carries it), logged with ``ctx.log`` as a real script would; `--fail-on N` makes it refuse
to run on N processes, for a configuration that fails.
"""

import argparse
import time

import torch
import torch.distributed as dist

import distrain

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=2)
parser.add_argument("--steps", type=int, default=5)
parser.add_argument("--fail-on", type=int, default=0)
parser.add_argument("--batch-size", type=int, default=10)
args = parser.parse_args()

ctx = distrain.init()
if ctx.world_size == args.fail_on:
    raise SystemExit(f"boom: this script refuses to run on {args.fail_on} processes")
grad = torch.ones(1024)
for epoch in range(1, args.epochs + 1):
    for _ in range(args.steps):
        if ctx.world_size > 1:
            dist.all_reduce(grad)
        time.sleep(0.02)
        ctx.log(epoch=epoch, samples=args.batch_size, loss=1.0)
    ctx.log(advance=False, accuracy=0.5, test_loss=1.0)
ctx.shutdown()

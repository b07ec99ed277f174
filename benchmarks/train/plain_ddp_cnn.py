"""The bench's `cnn` workload as a plain torchrun DDP script: no distrain in the training loop.

    OMP_NUM_THREADS=1 torchrun --standalone --nproc-per-node 2 benchmarks/train/plain_ddp_cnn.py \
        --image-size 56 --out DIR

The model and the data are the built-in workload's own (distrain.tools.bench.study.workload's Net
and digits split, imported so they are the same); everything else is what a torchrun tutorial
writes: init_process_group, DistributedDataParallel, DistributedSampler, set_epoch, SGD, an
evaluation all-reduced after each epoch.  Each rank notes when every optimizer step ends, as the
workload does, and writes DIR/bench/steps-rank-<R>.json, so the driver times both the same way.
"""

import argparse
import json
import os
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler

from distrain.tools.bench.study.workload import Net, digits, thread_cpu

p = argparse.ArgumentParser()
p.add_argument("--epochs", type=int, default=3)
p.add_argument("--batch-size", type=int, default=32)
p.add_argument("--image-size", type=int, default=32)
p.add_argument("--lr", type=float, default=0.05)
p.add_argument("--out", required=True)
p.add_argument("--no-ddp", action="store_true", help="one process: the model as it is, no DDP")
p.add_argument("--align", action="store_true", help="distrain's first-step comm hook on the DDP")
args = p.parse_args()

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
train_set, test_set = digits(args.image_size)
torch.manual_seed(0)
# a world of one without DDP is the single-process script a speedup is measured against
model = Net() if args.no_ddp else DistributedDataParallel(Net())
if args.align:  # what distrain's prepare_model adds to a DDP wrapper (parallel/ddp.py)
    from distrain.parallel.ddp import align_first_reduction

    align_first_reduction(model)
sampler = DistributedSampler(train_set, shuffle=True, seed=0, drop_last=True)
loader = DataLoader(train_set, batch_size=args.batch_size, sampler=sampler, drop_last=True)
test_loader = DataLoader(
    test_set, batch_size=256, sampler=DistributedSampler(test_set, shuffle=False)
)
opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
steps = []
for epoch in range(1, args.epochs + 1):
    sampler.set_epoch(epoch)
    for xb, yb in loader:
        loss = F.cross_entropy(model(xb), yb)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        steps.append([epoch, time.perf_counter(), len(xb)])
    model.eval()
    correct = torch.zeros(2)
    with torch.no_grad():
        for xb, yb in test_loader:
            correct += torch.tensor([(model(xb).argmax(1) == yb).sum().item(), len(yb)])
    model.train()
    dist.all_reduce(correct)
    if rank == 0:
        print(f"epoch {epoch}: test acc {correct[0] / correct[1]:.4f}", flush=True)
path = Path(args.out) / "bench" / f"steps-rank-{rank}.json"
path.parent.mkdir(parents=True, exist_ok=True)
path.write_text(
    json.dumps({"rank": rank, "world_size": world, "steps": steps, "thread_cpu_s": thread_cpu()})
)
del model  # release DDP before the group (gloo's exit can deadlock otherwise)
dist.destroy_process_group()

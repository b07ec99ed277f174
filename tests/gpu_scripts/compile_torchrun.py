"""A torchrun-style CUDA script that compiles its model (nanoGPT's default): rehearsed with --cpu.

init_process_group("nccl"), set_device(LOCAL_RANK), model.cuda(), torch.compile(model), DDP,
a few SGD steps; rank 0 saves the final parameters and the per-step losses.
"""

import argparse
import os
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

parser = argparse.ArgumentParser()
parser.add_argument("--out", required=True)
parser.add_argument("--steps", type=int, default=3)
args = parser.parse_args()

dist.init_process_group("nccl")
local_rank = int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(local_rank)
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 4)).cuda()
model = torch.compile(model)
model = DDP(model, device_ids=[local_rank])
opt = torch.optim.SGD(model.parameters(), lr=0.1)
g = torch.Generator().manual_seed(dist.get_rank())
losses = []
start = time.perf_counter()
for step in range(args.steps):
    x = torch.randn(8, 16, generator=g).cuda()
    y = torch.randn(8, 4, generator=g).cuda()
    loss = nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    losses.append(loss.item())
    if step == 0:
        first = time.perf_counter() - start
if dist.get_rank() == 0:
    state = {k: v.detach().cpu() for k, v in model.module.state_dict().items()}
    graphs = torch._dynamo.utils.counters["stats"]["unique_graphs"]  # compiled, not run eagerly
    torch.save(
        {"model": state, "losses": losses, "graphs": graphs}, os.path.join(args.out, "final.pt")
    )
    print(
        f"first step (compile) {first:.1f} s, all {time.perf_counter() - start:.1f} s", flush=True
    )
dist.destroy_process_group()

"""A plain torchrun script: ``init_process_group``, DDP, DistributedSampler; no distrain."""

import os

import torch
import torch.distributed as dist
import torch.nn.functional as F
from idiom_common import STEPS, after_step, dataset, finish, model
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler

dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
rank, world = dist.get_rank(), dist.get_world_size()
device = torch.device(f"cuda:{os.environ['LOCAL_RANK']}" if torch.cuda.is_available() else "cpu")
if device.type == "cuda":
    torch.cuda.set_device(device)
net = DDP(model().to(device), device_ids=[device.index] if device.type == "cuda" else None)
data = dataset()
sampler = DistributedSampler(data, seed=0)
loader = DataLoader(data, batch_size=16, sampler=sampler, drop_last=True)
opt = torch.optim.SGD(net.parameters(), lr=0.1)

step = epoch = 0
while step < STEPS:
    sampler.set_epoch(epoch)
    for xb, yb, ib in loader:
        loss = F.cross_entropy(net(xb.to(device)), yb.to(device))
        opt.zero_grad()
        loss.backward()
        opt.step()
        step += 1
        after_step(rank, step, ib)
        if step >= STEPS:
            break
    epoch += 1
finish(net.module, rank, world, step)
dist.destroy_process_group()

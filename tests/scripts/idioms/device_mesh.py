"""``init_device_mesh`` as the group's start (no ``init_process_group``), then FSDP2's
``fully_shard`` on that mesh, as torch's FSDP2 tutorial and torchtitan write it."""

import os

import torch
import torch.distributed as dist
import torch.nn.functional as F
from idiom_common import STEPS, after_step, dataset, finish, model
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler

device_type = "cuda" if torch.cuda.is_available() else "cpu"
world = int(os.environ["WORLD_SIZE"])
if device_type == "cuda":
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
mesh = init_device_mesh(device_type, (world,))  # starts the default process group itself
rank = dist.get_rank()
net = model().to(device_type)
for layer in net:
    if isinstance(layer, torch.nn.Linear):
        fully_shard(layer, mesh=mesh)
fully_shard(net, mesh=mesh)
data = dataset()
sampler = DistributedSampler(data, seed=0)
loader = DataLoader(data, batch_size=16, sampler=sampler, drop_last=True)
opt = torch.optim.SGD(net.parameters(), lr=0.1)

step = epoch = 0
while step < STEPS:
    sampler.set_epoch(epoch)
    for xb, yb, ib in loader:
        loss = F.cross_entropy(net(xb.to(device_type)), yb.to(device_type))
        opt.zero_grad()
        loss.backward()
        opt.step()
        step += 1
        after_step(rank, step, ib)
        if step >= STEPS:
            break
    epoch += 1
finish(net, rank, world, step)
dist.destroy_process_group()

"""spawn_tutorial.py converted by hand to CPU processes and gloo: the world size is an argument."""

import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.optim as optim
from torch.nn.parallel import DistributedDataParallel as DDP


def setup(rank, world_size):
    os.environ["MASTER_ADDR"] = "localhost"
    os.environ["MASTER_PORT"] = os.environ.get("TUTORIAL_PORT", "12355")
    dist.init_process_group("gloo", rank=rank, world_size=world_size)


class ToyModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.net1 = nn.Linear(10, 10)
        self.relu = nn.ReLU()
        self.net2 = nn.Linear(10, 5)

    def forward(self, x):
        return self.net2(self.relu(self.net1(x)))


def demo_basic(rank, world_size, out):
    setup(rank, world_size)
    torch.manual_seed(0)
    model = ToyModel()
    ddp_model = DDP(model)
    loss_fn = nn.MSELoss()
    optimizer = optim.SGD(ddp_model.parameters(), lr=0.001)
    torch.manual_seed(100 + rank)
    for _ in range(5):
        optimizer.zero_grad()
        outputs = ddp_model(torch.randn(20, 10))
        labels = torch.randn(20, 5)
        loss_fn(outputs, labels).backward()
        optimizer.step()
    if rank == 0:
        torch.save(ddp_model.module.state_dict(), os.path.join(out, "final.pt"))
    dist.destroy_process_group()


if __name__ == "__main__":
    world_size = int(sys.argv[2])
    mp.spawn(demo_basic, args=(world_size, sys.argv[1]), nprocs=world_size, join=True)

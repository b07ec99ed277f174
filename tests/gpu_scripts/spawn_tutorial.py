"""GPU-only DDP as in PyTorch's "Getting Started with DDP" tutorial: mp.spawn, hard-coded master.

The world size is torch.cuda.device_count(); MASTER_ADDR/MASTER_PORT are set in the script.
(The port comes from TUTORIAL_PORT when set, so parallel test runs don't collide.)

    python spawn_tutorial.py DIR                       (one process per GPU)
    distrain run --cpu -n 2 spawn_tutorial.py DIR      (2 CPU processes stand in for 2 GPUs)
"""

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
    dist.init_process_group("nccl", rank=rank, world_size=world_size)


def cleanup():
    dist.destroy_process_group()


class ToyModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.net1 = nn.Linear(10, 10)
        self.relu = nn.ReLU()
        self.net2 = nn.Linear(10, 5)

    def forward(self, x):
        return self.net2(self.relu(self.net1(x)))


def demo_basic(rank, world_size, out):
    print(f"Running basic DDP example on rank {rank}.")
    setup(rank, world_size)
    torch.manual_seed(0)
    model = ToyModel().to(rank)
    ddp_model = DDP(model, device_ids=[rank])
    loss_fn = nn.MSELoss()
    optimizer = optim.SGD(ddp_model.parameters(), lr=0.001)
    torch.manual_seed(100 + rank)
    for _ in range(5):
        optimizer.zero_grad()
        outputs = ddp_model(torch.randn(20, 10))
        labels = torch.randn(20, 5).to(rank)
        loss_fn(outputs, labels).backward()
        optimizer.step()
    if rank == 0:
        torch.save(ddp_model.module.state_dict(), os.path.join(out, "final.pt"))
    cleanup()
    print(f"Finished running basic DDP example on rank {rank}.")


def run_demo(demo_fn, world_size, out):
    mp.spawn(demo_fn, args=(world_size, out), nprocs=world_size, join=True)


if __name__ == "__main__":
    n_gpus = torch.cuda.device_count()
    assert n_gpus >= 2, f"Requires at least 2 GPUs to run, but got {n_gpus}"
    world_size = n_gpus
    run_demo(demo_basic, world_size, sys.argv[1])

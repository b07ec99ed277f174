"""The DDP tutorial's self-start: ``mp.spawn`` inside the script, a fixed master address, and
``IDIOM_WORLD`` (default 2) children on one gloo group with DistributedSampler."""

import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from idiom_common import STEPS, after_step, dataset, finish, model
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler


def main(rank: int, world: int) -> None:
    """One child: join the group, train, report."""
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", os.environ.get("IDIOM_MASTER_PORT", "29577"))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    net = DDP(model())
    data = dataset()
    sampler = DistributedSampler(data, num_replicas=world, rank=rank, seed=0)
    loader = DataLoader(data, batch_size=16, sampler=sampler, drop_last=True)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    step = epoch = 0
    while step < STEPS:
        sampler.set_epoch(epoch)
        for xb, yb, ib in loader:
            loss = F.cross_entropy(net(xb), yb)
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


if __name__ == "__main__":
    world_size = int(os.environ.get("IDIOM_WORLD", "2"))
    mp.spawn(main, args=(world_size,), nprocs=world_size, join=True)

"""A self-starting training script (the DDP tutorial's shape): ``mp.spawn`` inside the script.

    python spawn_train.py OUT WORLD [--steps N] [--step-sleep S] [--rerun-steps M]

Every child joins a gloo group on MASTER_ADDR/MASTER_PORT (the port from DTEST_MASTER_PORT,
else 12355), trains a toy model with fixed seeds and DDP, and rank 0 writes OUT/final.pt. There
is no checkpoint: a run started again trains from scratch and ends bit for bit the same.
OUT/started is touched once both children trained their first step (the chaos campaign aims its
faults from there).  ``--rerun-steps M``: a run the agent started again (TORCHELASTIC_RESTART_COUNT
above 0) trains M steps instead, for a test that only needs the rerun to reach its end.
"""

import argparse
import os
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


def train(rank: int, world: int, args: argparse.Namespace) -> None:
    """One child: form the group, train `args.steps` steps, save from rank 0."""
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = os.environ.get("DTEST_MASTER_PORT", "12355")
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(0)
    model = DDP(nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 5)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    data = torch.Generator().manual_seed(100 + rank)
    for step in range(args.steps):
        opt.zero_grad()
        x, y = torch.randn(20, 10, generator=data), torch.randn(20, 5, generator=data)
        nn.functional.mse_loss(model(x), y).backward()
        opt.step()
        if step == 0:
            dist.barrier()
            if rank == 0:
                open(os.path.join(args.out, "started"), "w").close()
        time.sleep(args.step_sleep)
    if rank == 0:
        torch.save(model.module.state_dict(), os.path.join(args.out, "final.pt"))
        print(f"finished at step {args.steps}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("world", type=int)
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--step-sleep", type=float, default=0.1)
    p.add_argument("--rerun-steps", type=int, default=-1)
    args = p.parse_args()
    if args.rerun_steps >= 0 and os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") != "0":
        args.steps = args.rerun_steps
    os.makedirs(args.out, exist_ok=True)
    mp.spawn(train, args=(args.world, args), nprocs=args.world, join=True)

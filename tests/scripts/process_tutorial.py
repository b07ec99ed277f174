"""The tutorial shape that starts its own workers with a loop of ``multiprocessing.Process``.

As in the Chinese image-classification tutorials: ``MASTER_PORT`` fixed in the script (here
taken from DTEST_MASTER_PORT so parallel tests do not clash), one child per rank started in a
loop, each calling ``init_process_group(rank=rank, world_size=world_size)`` and using
``cuda:rank`` when CUDA is there (under ``distrain run --cpu`` it is a stand-in).  Each child
prints ``child rank R of W formed`` once its group formed, trains a small DDP model and
prints its final loss.  ``DTEST_FAIL_RANK=R`` makes child R raise before init_process_group,
``DTEST_HANG_RANK=R`` makes it sleep there instead.
"""

import argparse
import os
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP


def main_fun(rank: int, world_size: int, args: argparse.Namespace) -> None:
    if os.environ.get("DTEST_FAIL_RANK") == str(rank):
        raise RuntimeError(f"child {rank} cannot start (DTEST_FAIL_RANK)")
    if os.environ.get("DTEST_HANG_RANK") == str(rank):
        time.sleep(3600)  # stuck before its rendezvous: the others wait for it
    cuda = torch.cuda.is_available()
    if cuda:
        torch.cuda.set_device(rank)  # invalid device ordinal when world_size > the GPUs
    device = torch.device("cuda", rank) if cuda else torch.device("cpu")
    dist.init_process_group(
        "nccl" if cuda else "gloo", init_method="env://", rank=rank, world_size=world_size
    )
    print(f"child rank {rank} of {world_size} formed (pid {os.getpid()})", flush=True)
    torch.manual_seed(0)
    model = DDP(torch.nn.Linear(8, 1).to(device), device_ids=[rank] if cuda else None)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    gen = torch.Generator().manual_seed(rank)
    x, y = torch.randn(64, 8, generator=gen), torch.randn(64, 1, generator=gen)
    first = last = 0.0
    for step in range(args.steps):
        loss = torch.nn.functional.mse_loss(model(x.to(device)), y.to(device))
        opt.zero_grad()
        loss.backward()
        opt.step()
        first = loss.item() if step == 0 else first
        last = loss.item()
    print(f"child rank {rank} trained: loss {first:.4f} -> {last:.4f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--world-size", type=int, default=torch.cuda.device_count() or 2)
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()
    os.environ["MASTER_ADDR"] = "localhost"
    os.environ["MASTER_PORT"] = os.environ.get("DTEST_MASTER_PORT", "12355")
    processes = []
    for rank in range(args.world_size):
        p = mp.Process(target=main_fun, args=(rank, args.world_size, args))
        p.start()
        processes.append(p)
    for p in processes:
        p.join()

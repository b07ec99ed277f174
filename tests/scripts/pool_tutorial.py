"""A ``multiprocessing.Pool`` whose workers form a group: each task is one rank.

MASTER_PORT comes from DTEST_MASTER_PORT (fixed in the script, as tutorials do).  Each rank
all-reduces its rank + 1 and returns the sum; the parent prints one line per rank.
``DTEST_FAIL_RANK=R`` makes rank R's task raise before init_process_group (the pool keeps
its worker, so only the formation bound ends the job).
"""

import os

import torch
import torch.distributed as dist
from torch import multiprocessing


def work(rank: int, world_size: int) -> tuple[int, float]:
    if os.environ.get("DTEST_FAIL_RANK") == str(rank):
        raise RuntimeError(f"task {rank} cannot start (DTEST_FAIL_RANK)")
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    total = torch.tensor([rank + 1.0])
    dist.all_reduce(total)
    dist.destroy_process_group()
    return rank, total.item()


if __name__ == "__main__":
    world_size = 2
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = os.environ.get("DTEST_MASTER_PORT", "12356")
    with multiprocessing.get_context("spawn").Pool(world_size) as pool:
        for rank, total in pool.starmap(work, [(r, world_size) for r in range(world_size)]):
            print(f"pool rank {rank} of {world_size}: all-reduced {total:g}", flush=True)

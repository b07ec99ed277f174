"""A self-starting script (mp.spawn, always) whose child 1 raises a RuntimeError after its group
formed: the script's own failure, to be reported once with its cause, never rerun."""

import os
import sys

import torch.distributed as dist
import torch.multiprocessing as mp


def worker(rank: int, world_size: int) -> None:
    """Form the group; rank 1 fails."""
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    print(f"child rank {rank} started", flush=True)
    dist.barrier()
    if rank == 1:
        raise RuntimeError("child 1 failed on its own")
    dist.barrier()


if __name__ == "__main__":
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = sys.argv[1]
    mp.spawn(worker, args=(2,), nprocs=2)

"""Runs core_job.py in N processes started by distrain.spawn (torch.multiprocessing.spawn)."""

import os
import runpy
import sys

import distrain

HERE = os.path.dirname(os.path.abspath(__file__))


def worker(rank: int, argv: list[str]) -> None:
    sys.argv = [os.path.join(HERE, "core_job.py"), *argv]
    runpy.run_path(sys.argv[0], run_name="__main__")


if __name__ == "__main__":
    nprocs = int(sys.argv[1])
    distrain.spawn(worker, nprocs, args=(sys.argv[2:],))

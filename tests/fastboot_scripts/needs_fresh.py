"""Refuses to run in a forked worker, before training (tests the fast path's fallback)."""

import multiprocessing
import os

if multiprocessing.parent_process() is not None:
    raise RuntimeError("this script must be started in a fresh interpreter")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

dist.init_process_group("gloo")
t = torch.ones(1)
dist.all_reduce(t)
with open(os.path.join(os.environ["PROBE_OUT"], f"rank{dist.get_rank()}.txt"), "w") as f:
    f.write(str(t.item()))
dist.destroy_process_group()

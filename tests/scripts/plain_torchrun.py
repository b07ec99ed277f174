"""A plain torchrun script with no distrain import: must run unchanged under `distrain run`."""

import os
import sys

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
t = torch.tensor([float(dist.get_rank() + 1)])
dist.all_reduce(t)
out = sys.argv[1]
with open(os.path.join(out, f"plain{dist.get_rank()}.txt"), "w") as f:
    f.write(f"{dist.get_world_size()} {t.item()} {os.environ['LOCAL_RANK']}")
dist.destroy_process_group()

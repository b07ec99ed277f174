"""A rank that imports torch, forms a gloo group and all-reduces once (issue 41)."""

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
t = torch.ones(1)
dist.all_reduce(t)
dist.destroy_process_group()

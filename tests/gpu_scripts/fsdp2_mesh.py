"""A torchrun-style FSDP2 script on a CUDA device mesh (torchtitan's way): rehearsed with --cpu.

init_process_group("nccl"), set_device(LOCAL_RANK), init_device_mesh("cuda", (WORLD_SIZE,)),
fully_shard per layer then on the root (or ``--mode replicate``: FSDP2's replicate, every rank
holding all parameters), AdamW steps; rank 0 saves the gathered parameters of every rank.
"""

import argparse
import os

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

parser = argparse.ArgumentParser()
parser.add_argument("--out", required=True)
parser.add_argument("--steps", type=int, default=3)
parser.add_argument("--mode", choices=["fully_shard", "replicate"], default="fully_shard")
args = parser.parse_args()

dist.init_process_group("nccl")
torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
mesh = init_device_mesh("cuda", (dist.get_world_size(),))
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
if args.mode == "replicate":
    from torch.distributed._composable.replicate_with_fsdp import replicate

    replicate(model, mesh=mesh)
else:
    for layer in model:
        if isinstance(layer, nn.Linear):
            fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
opt = torch.optim.AdamW(model.parameters(), lr=0.01)
g = torch.Generator().manual_seed(dist.get_rank())
for _ in range(args.steps):
    x, y = torch.randn(8, 16, generator=g).cuda(), torch.randn(8, 4, generator=g).cuda()
    loss = nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
full = {k: v.full_tensor() for k, v in model.state_dict().items()}
ranks = [None] * dist.get_world_size()
dist.all_gather_object(ranks, full)
if dist.get_rank() == 0:
    torch.save(
        {"model": full, "ranks": ranks, "mesh": mesh.device_type},
        os.path.join(args.out, "final.pt"),
    )
dist.destroy_process_group()

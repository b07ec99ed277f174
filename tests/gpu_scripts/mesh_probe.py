"""FSDP2 on a device mesh, started the ways torch documents: probed under ``distrain run --cpu``.

``--device cuda`` is the GPU script (nccl, ``init_device_mesh("cuda", ...)``, ``.cuda()`` data);
``--device cpu`` is the same script on the CPU (gloo, a CPU mesh), the twin a rehearsal must equal
bit for bit.  ``--start pg`` calls ``init_process_group`` first; ``--start mesh`` leaves the
group's start to torch: ``init_device_mesh`` starts it, or, with ``--mesh none``,
``fully_shard`` does (its default mesh).  ``--mesh`` is a 1-D mesh over every rank, a 2-D HSDP
mesh (``("replicate", "shard")``, two replicas) or none.  Rank 0 saves the full parameters, the
losses and what the group and the mesh were.
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
parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
parser.add_argument("--start", choices=["pg", "mesh"], default="mesh")
parser.add_argument("--mesh", choices=["1d", "hsdp", "none"], default="1d")
parser.add_argument("--steps", type=int, default=3)
args = parser.parse_args()

world = int(os.environ["WORLD_SIZE"])
if args.start == "pg":
    dist.init_process_group("nccl" if args.device == "cuda" else "gloo")
mesh = None
if args.mesh == "1d":
    mesh = init_device_mesh(args.device, (world,))
elif args.mesh == "hsdp":
    mesh = init_device_mesh(args.device, (2, world // 2), mesh_dim_names=("replicate", "shard"))
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
for layer in model:
    if isinstance(layer, nn.Linear):
        fully_shard(layer, mesh=mesh)
fully_shard(model, mesh=mesh)  # with no mesh (and no group): fully_shard starts the group
opt = torch.optim.AdamW(model.parameters(), lr=0.01)
g = torch.Generator().manual_seed(dist.get_rank())
losses = []
for _ in range(args.steps):
    x, y = torch.randn(8, 16, generator=g), torch.randn(8, 4, generator=g)
    if args.device == "cuda":
        x, y = x.cuda(), y.cuda()
    loss = nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    losses.append(loss.detach().cpu())
full = {k: v.full_tensor().cpu() for k, v in model.state_dict().items()}
every = [None] * world
dist.all_gather_object(every, {"model": full, "losses": losses})
# what torch would pick for the accelerator it sees: a rehearsal must say gloo, as it runs
acc = torch.accelerator.current_accelerator()
default_backend = dist.get_default_backend_for_device(acc) if acc is not None else None
if dist.get_rank() == 0:
    first = model[0].weight
    torch.save(
        {
            "ranks": every,
            "backend": dist.get_backend(),
            "accelerator": [acc and acc.type, default_backend],
            "mesh": first.device_mesh.device_type,
            "mesh_shape": tuple(first.device_mesh.shape),
        },
        os.path.join(args.out, "final.pt"),
    )
dist.destroy_process_group()

"""GPU-only DDP in the `python -m torch.distributed.launch` style: --local_rank on the command line.

python -m torch.distributed.launch --nproc_per_node 2 legacy_launch.py --out DIR
distrain run --cpu -n 2 --legacy-local-rank legacy_launch.py --out DIR
"""

import argparse
import os

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument(
        "--local_rank", "--local-rank", type=int, default=int(os.environ.get("LOCAL_RANK", 0))
    )
    parser.add_argument("--out", required=True)
    parser.add_argument("--steps", type=int, default=12)
    args = parser.parse_args()

    torch.cuda.set_device(args.local_rank)
    device = torch.device("cuda", args.local_rank)
    dist.init_process_group(backend="nccl", init_method="env://")
    world = dist.get_world_size()

    torch.manual_seed(1)
    model = nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 1)).cuda()
    model = nn.parallel.DistributedDataParallel(
        model, device_ids=[args.local_rank], output_device=args.local_rank
    )
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)

    g = torch.Generator().manual_seed(2)
    for step in range(args.steps):
        x = torch.randn(world * 6, 16, generator=g)[dist.get_rank() :: world].to(device)
        y = x.sum(dim=1, keepdim=True).sin()
        loss = F.mse_loss(model(x), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if step % 4 == 0 and dist.get_rank() == 0:
            print(f"step {step} loss {loss.item():.5f} on {torch.cuda.get_device_name(device)}")
    if dist.get_rank() == 0:
        torch.save({"model": model.module.state_dict()}, os.path.join(args.out, "final.pt"))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

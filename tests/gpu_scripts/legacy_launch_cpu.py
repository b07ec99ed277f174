"""legacy_launch.py converted by hand to CPU processes and gloo (its rehearsal's reference)."""

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

    dist.init_process_group(backend="gloo", init_method="env://")
    world = dist.get_world_size()

    torch.manual_seed(1)
    model = nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 1))
    model = nn.parallel.DistributedDataParallel(model)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)

    g = torch.Generator().manual_seed(2)
    for step in range(args.steps):
        x = torch.randn(world * 6, 16, generator=g)[dist.get_rank() :: world]
        y = x.sum(dim=1, keepdim=True).sin()
        loss = F.mse_loss(model(x), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if step % 4 == 0 and dist.get_rank() == 0:
            print(f"step {step} loss {loss.item():.5f}")
    if dist.get_rank() == 0:
        torch.save({"model": model.module.state_dict()}, os.path.join(args.out, "final.pt"))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

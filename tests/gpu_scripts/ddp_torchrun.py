"""GPU-only DDP training in the style of PyTorch's torchrun tutorial (LOCAL_RANK from the env).

torchrun --nproc-per-node 2 ddp_torchrun.py --out DIR      (needs 2 GPUs and NCCL)
distrain run --cpu -n 2 ddp_torchrun.py --out DIR           (rehearsal on 2 CPU processes)
"""

import argparse
import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--epochs", type=int, default=2)
    args = parser.parse_args()

    local_rank = int(os.environ["LOCAL_RANK"])
    dist.init_process_group("nccl")
    torch.cuda.set_device(local_rank)
    torch.backends.cudnn.benchmark = True
    rank = dist.get_rank()

    torch.manual_seed(0)
    torch.cuda.manual_seed_all(0)
    data = TensorDataset(torch.randn(96, 20), torch.randint(0, 4, (96,)))
    sampler = DistributedSampler(data, shuffle=True, seed=0)
    loader = DataLoader(data, batch_size=8, sampler=sampler)

    model = nn.Sequential(nn.Linear(20, 32), nn.ReLU(), nn.Linear(32, 4)).to(local_rank)
    model = DDP(model, device_ids=[local_rank])
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss().cuda()

    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        total = torch.zeros(1, device="cuda")
        for x, y in loader:
            x, y = x.cuda(non_blocking=True), y.cuda(non_blocking=True)
            optimizer.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            optimizer.step()
            total += loss.detach()
        dist.all_reduce(total, op=dist.ReduceOp.AVG)
        torch.cuda.synchronize()
        if rank == 0:
            print(
                f"epoch {epoch}: loss {total.item() / len(loader):.4f}, peak memory "
                f"{torch.cuda.max_memory_allocated() >> 20} MiB"
            )
    if rank == 0:
        torch.save(model.module.state_dict(), os.path.join(args.out, "final.pt"))
        torch.save(total, os.path.join(args.out, "metric.pt"))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

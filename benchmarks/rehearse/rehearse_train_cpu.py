"""rehearse_train_gpu.py converted by hand to CPU processes and gloo (the benchmark's reference)."""

import argparse
import json
import statistics
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


def make_model(kind):
    if kind == "mlp":  # tiny: per-call overheads would show
        return nn.Sequential(
            nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10)
        )
    return nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1),
        nn.BatchNorm2d(32),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1),
        nn.BatchNorm2d(64),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(64, 64, 3, padding=1),
        nn.BatchNorm2d(64),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(64, 10),
    )


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="cnn", choices=("cnn", "mlp"))
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--warmup", type=int, default=10)
    args = p.parse_args()
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = DDP(make_model(args.model))
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    shape = (32, 32) if args.model == "mlp" else (32, 3, 32, 32)
    x_all, y_all = torch.randn(8, *shape), torch.randint(0, 10, (8, 32))
    times = []
    for step in range(args.warmup + args.steps):
        t = time.perf_counter()
        x, y = x_all[step % 8], y_all[step % 8]
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        times.append(time.perf_counter() - t)
    if dist.get_rank() == 0:
        print(json.dumps({"step_s": statistics.median(times[args.warmup :])}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

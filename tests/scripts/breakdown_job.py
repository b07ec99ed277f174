"""A small DDP job for the step-breakdown tests: a balanced run, or one made slow on purpose.

``--slow-rank R --slow-s S``: rank R burns S more seconds of CPU in every forward (a straggler's
compute: CPU time, not a sleep, since on CPU the straggler rule compares the CPU time of compute);
``--data-sleep S``: the dataset sleeps S seconds per sample (a slow loader, num_workers=0);
``--plain``: loss.backward() and opt.step() instead of ctx.backward / ctx.step.
"""

import argparse
import time

import torch
from torch import nn
from torch.utils.data import Dataset

import distrain

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=60)
p.add_argument("--slow-rank", type=int, default=-1)
p.add_argument("--slow-s", type=float, default=0.0)
p.add_argument("--data-sleep", type=float, default=0.0)
p.add_argument("--plain", action="store_true")
args = p.parse_args()


class Samples(Dataset):
    def __init__(self, n: int) -> None:
        g = torch.Generator().manual_seed(0)
        self.x, self.y = torch.randn(n, 64, generator=g), torch.randint(0, 10, (n,), generator=g)

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int):
        if args.data_sleep:
            time.sleep(args.data_sleep)
        return self.x[i], self.y[i]


class Net(nn.Module):
    def __init__(self, slow_s: float) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.Linear(64, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10)
        )
        self.slow_s = slow_s

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.slow_s:
            until = time.thread_time() + self.slow_s
            while time.thread_time() < until:  # busy: more work, not a wait
                pass
        return self.body(x)


ctx = distrain.init(verbose=False)
model = ctx.prepare_model(Net(args.slow_s if ctx.rank == args.slow_rank else 0.0))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
loader = ctx.prepare_loader(Samples(64 * 2 * args.steps), batch_size=64, num_workers=0)
for step, (x, y) in enumerate(loader, 1):
    loss = nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    if args.plain:
        loss.backward()
        opt.step()
    else:
        ctx.backward(loss)
        ctx.step(opt)
    ctx.log(loss=loss, samples=len(x))
    if step >= args.steps:
        break
ctx.print(f"done {ctx.steps} steps")
ctx.shutdown()

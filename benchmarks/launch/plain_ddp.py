"""A plain torchrun DDP script (no distrain import): tiny MLP, optional checkpoint/resume.

    torchrun --nproc-per-node 2 benchmarks/launch/plain_ddp.py --steps 20
    distrain run -n 2 benchmarks/launch/plain_ddp.py --steps 20

With BENCH_FIRST_STEP_FILE set, every rank appends "rank restart_count time load_s pid" after
its first optimizer step of each start (launch_bench.py, launch_timeline.py and
benchmarks/recovery/recovery.py --job plain read it).  With --ckpt, rank 0 saves
model+optimizer+step every step and every start resumes from it.
"""

import argparse
import os
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=20)
p.add_argument(
    "--sleep", type=float, default=0.0, help="seconds per step (stretch the run for kill tests)"
)
p.add_argument("--ckpt", default="", help="checkpoint file: save every step, resume at start")
args = p.parse_args()

dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = nn.parallel.DistributedDataParallel(
    nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 10))
)
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
start_step, load_s = 0, 0.0
if args.ckpt and os.path.exists(args.ckpt):
    t = time.perf_counter()
    state = torch.load(args.ckpt, weights_only=True)
    model.module.load_state_dict(state["model"])
    opt.load_state_dict(state["opt"])
    start_step, load_s = state["step"], time.perf_counter() - t

gen = torch.Generator().manual_seed(1000 + rank)
for step in range(start_step, args.steps):
    x, y = torch.randn(64, 64, generator=gen), torch.randint(0, 10, (64,), generator=gen)
    loss = F.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    if step == start_step and os.environ.get("BENCH_FIRST_STEP_FILE"):
        with open(os.environ["BENCH_FIRST_STEP_FILE"], "a") as f:
            f.write(
                f"{rank} {os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')} {time.time()} "
                f"{load_s} {os.getpid()}\n"
            )
    if args.ckpt and rank == 0:
        tmp = args.ckpt + ".tmp"
        torch.save(
            {"model": model.module.state_dict(), "opt": opt.state_dict(), "step": step + 1}, tmp
        )
        os.replace(tmp, args.ckpt)
    time.sleep(args.sleep)

# release the DDP reducer before the process group (gloo exit hang/abort:
# benchmarks/recovery/exit_tally.py)
del model
dist.destroy_process_group()

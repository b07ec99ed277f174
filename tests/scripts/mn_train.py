"""A small distrain training job for the multi-node, launcher and watchdog tests.

Trains a tiny MLP for --steps steps on synthetic data, checks that a real all-reduce over the
whole world works, and (rank 0) writes a JSON summary to --out.  --hang-rank R --hang-step K makes
rank R sleep forever after step K (the watchdog test).
"""

import argparse
import json
import os
import socket
import time

import psutil
import torch
import torch.nn.functional as F
from torch import nn

import distrain

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=5)
p.add_argument("--out", default="")
p.add_argument("--hang-rank", type=int, default=-1)
p.add_argument("--hang-step", type=int, default=3)
args = p.parse_args()

ctx = distrain.init()
torch.manual_seed(0)
model = ctx.prepare_model(nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4)))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
gen = torch.Generator().manual_seed(1000 + ctx.rank)
for step in range(1, args.steps + 1):
    x = torch.randn(8, 16, generator=gen).to(ctx.device)
    loss = F.cross_entropy(model(x), x[:, :4].argmax(1))
    opt.zero_grad()
    ctx.backward(loss)
    ctx.step(opt)
    if ctx.rank == args.hang_rank and step == args.hang_step:
        print(f"rank {ctx.rank} going to sleep at step {step}", flush=True)
        while True:
            time.sleep(3600)  # the deliberate hang
ranks = ctx.all_reduce(torch.tensor([float(ctx.rank)])).item()
hosts = ctx.gather_object(
    {
        "rank": ctx.rank,
        "host_ns": os.environ.get("DTEST_NODE", socket.gethostname()),
        "master_addr": os.environ.get("MASTER_ADDR"),
        "gloo_ifname": os.environ.get("GLOO_SOCKET_IFNAME"),
        "node_rank": ctx.node_rank,
        "threads": torch.get_num_threads(),
        "launcher": ctx.env.name,
    }
)
# where rank 0's store listens (the security claim: only on the chosen interface)
listen = sorted(
    {
        c.laddr.ip
        for c in psutil.Process().net_connections(kind="tcp")
        if c.status == psutil.CONN_LISTEN
        and c.laddr.port == int(os.environ.get("MASTER_PORT", "0"))
    }
)
checksum = sum(float(p.detach().double().sum()) for p in model.parameters())
if ctx.is_main and args.out:
    with open(args.out, "w") as f:
        json.dump(
            {
                "world_size": ctx.world_size,
                "rank_sum": ranks,
                "ranks": hosts,
                "checksum": checksum,
                "steps": ctx.steps,
                "store_listen": listen,
            },
            f,
        )
ctx.print(f"done: world {ctx.world_size} rank_sum {ranks:g}")
ctx.shutdown()

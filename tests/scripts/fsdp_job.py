"""A job for the sharding tests: train a tiny residual net several ways, write what tests compare.

    fsdp_job.py --out DIR RUN [RUN ...]     # RUN: a name from RUNS below

Every run trains the same global batch of 12 (split over the ranks and micro-steps) in float64
with AdamW and gradient clipping.  Rank r writes DIR/RUN/rank{r}.json: the full initial and final
state (rank 0), the clipped norms, and how many reduce-scatters each micro-step's backward issued.
Several runs share one process because starting one costs more than training here.
"""

import argparse
import json
import os

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import CheckpointWrapper
from torch.utils.data import TensorDataset

import distrain

p = argparse.ArgumentParser()
p.add_argument("--out", required=True)
p.add_argument("runs", nargs="+")
args = p.parse_args()

#: run name -> (strategy: a name or a strategy object, built under init_model, accumulation
#: micro-steps, seed differs per rank, activation checkpointing)
RUNS = {
    "plain": ("ddp", False, 1, False, False),
    "ddp-meta": ("ddp", True, 1, False, False),
    "fsdp-meta": ("fsdp", True, 1, True, False),
    "fsdp-accum": ("fsdp", True, 3, True, False),
    # an object's own option reaches fully_shard: no re-gathering in backward
    "fsdp-seeded": (distrain.FSDP(reshard_after_forward=False), False, 1, True, False),
    "fsdp-ac": ("fsdp", True, 1, False, True),
    "hsdp": (
        distrain.HSDP(replicate=2),
        False,
        1,
        True,
        False,
    ),  # 2 replicas of 2 shards on 4 ranks
    "hsdp-one-node": ("hsdp", True, 1, False, False),  # default replicate: one per node, so 1 x 2
}
STEPS, GLOBAL_BATCH, MAX_NORM = 4, 12, 0.3

torch.set_default_dtype(torch.float64)
ctx = distrain.init(verbose=False)


class Block(nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(d, 2 * d), nn.Linear(2 * d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.fc2(torch.tanh(self.fc1(x)))


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inp = nn.Linear(6, 8)
        self.blocks = nn.ModuleList([Block(8) for _ in range(3)])
        # torch's own layers (nn.MultiheadAttention inside): they too must build on meta and shard
        self.mix = nn.ModuleList(
            [nn.TransformerEncoderLayer(4, 2, 8, dropout=0.0, batch_first=True) for _ in range(2)]
        )
        self.norm = nn.LayerNorm(8)
        self.out = nn.Linear(8, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.inp(x)
        for block in self.blocks:
            h = block(h)
        for layer in self.mix:  # each sample as a sequence of 2 tokens of width 4
            h = layer(h.view(-1, 2, 4)).reshape(-1, 8)
        return self.out(self.norm(h))


def data(n: int = 96) -> TensorDataset:
    g = torch.Generator().manual_seed(7)
    x = torch.randn(n, 6, generator=g)
    y = (x @ torch.randn(6, 1, generator=g)).squeeze(1) + 0.1 * torch.randn(n, generator=g)
    return TensorDataset(x, y)


#: calls of FSDP's collectives: reduce-scatters (the gradient reduction of a sharded model) and
#: all-gathers (a unit's full weights; again in backward unless reshard_after_forward=False)
calls = {"reduce_scatter_single": 0, "all_gather_single": 0}


def _count(name: str) -> None:
    if not hasattr(dist, name):
        return
    real = getattr(dist, name)

    def counting(*a, **k):  # type: ignore[no-untyped-def]
        calls[name] += 1
        return real(*a, **k)

    setattr(dist, name, counting)


for _name in calls:
    _count(_name)


def train(name: str) -> dict:
    strategy, meta, accum, per_rank_seed, recompute = RUNS[name]
    torch.manual_seed(1000 + (ctx.rank if per_rank_seed else 0))
    if meta:
        with ctx.init_model():
            net = Net()
        built_on_meta = all(t.is_meta for t in net.parameters())
    else:
        net, built_on_meta = Net(), False
    model = ctx.prepare_model(net, strategy=strategy, activation_checkpointing=recompute)
    result: dict = {
        "rank": ctx.rank,
        "built_on_meta": built_on_meta,
        "unwrap_is_net": ctx.unwrap(model) is net,
    }
    result["checkpointed_blocks"] = sum(isinstance(m, CheckpointWrapper) for m in model.modules())
    result["local_numel"] = sum(
        (t.to_local() if hasattr(t, "to_local") else t).numel() for t in model.parameters()
    )
    result["initial"] = {k: v.tolist() for k, v in ctx.full_state_dict(model).items()}
    batch = GLOBAL_BATCH // ctx.world_size // accum
    loader = ctx.prepare_loader(data(), batch_size=batch, seed=3)
    opt = torch.optim.AdamW(model.parameters(), lr=0.02)
    norms, counts, step, micro, gathers_before = [], [], 0, 0, calls["all_gather_single"]
    while step < STEPS:
        for xb, yb in loader:
            before = calls["reduce_scatter_single"]
            with ctx.accumulate(model, micro, accum):
                loss = F.mse_loss(model(xb).squeeze(1), yb) / accum
                ctx.backward(loss)
            counts.append(calls["reduce_scatter_single"] - before)
            micro += 1
            if micro % accum == 0:
                norms.append(float(ctx.clip_grad_norm(model, MAX_NORM, opt)))
                ctx.step(opt)
                opt.zero_grad()
                step += 1
                if step == STEPS:
                    break
    result["final"] = {k: v.tolist() for k, v in ctx.full_state_dict(model).items()}
    result.update(
        norms=norms, reduce_scatters=counts, all_gathers=calls["all_gather_single"] - gathers_before
    )
    return result


for name in args.runs:
    out = os.path.join(args.out, name)
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, f"rank{ctx.rank}.json"), "w") as f:
        json.dump(train(name), f)
ctx.shutdown()

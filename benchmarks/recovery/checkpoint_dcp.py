"""DCP checkpoints (format 2) against the 0.1 format, and async stall against sync, side by side.

    PYTHONPATH=src distrain run -n 2 benchmarks/recovery/checkpoint_dcp.py --params 25e6 --rounds 3
    PYTHONPATH=src distrain run -n 2 benchmarks/recovery/checkpoint_dcp.py --params 25e6 \
        --strategy fsdp

An MLP of about --params parameters with SGD momentum (a checkpoint holds ~2 × 4 × params
bytes), DDP or FSDP2.  Each round, interleaved:
  0.1 save   what distrain 0.1 did: rank 0 torch.saves the whole model + optimizer state into
             one file (sha256 while writing, fsync, rename), every rank its RNG file, barrier
  0.1 load   sha256 check of the file, torch.load(weights_only=True), load_state_dict
  DCP save   ``Checkpointer.save`` (sync): every rank writes its DCP part, sha256, manifest
  DCP load   a fresh ``Checkpointer.restore``: verify every file, DCP load, set_state_dict
  async      the training-loop stall of ``Checkpointer.save`` with async_save=True
All times are the slowest rank's, medians over rounds.  (0.1 rows only for DDP: 0.1 had no FSDP.)
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import time

import torch
import torch.distributed as dist
from torch import nn

import distrain
from distrain.checkpoint import rng_state
from distrain.checkpoint.files import atomic_write, file_sha256


def slowest(ctx: distrain.Context, seconds: float) -> float:
    """The largest of every rank's `seconds`."""
    return float(ctx.all_reduce(seconds, op="max"))


def timed(ctx: distrain.Context, fn) -> float:  # type: ignore[no-untyped-def]
    """Wall time of `fn()` on the slowest rank, starting together."""
    ctx.barrier()
    t0 = time.perf_counter()
    fn()
    return slowest(ctx, time.perf_counter() - t0)


def main() -> None:
    """Interleaved rounds; rank 0 prints one table."""
    p = argparse.ArgumentParser()
    p.add_argument("--params", type=float, default=25e6)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--strategy", choices=["ddp", "fsdp"], default="ddp")
    p.add_argument("--dir", default="/tmp/distrain-dcpbench")
    args = p.parse_args()
    ctx = distrain.init(verbose=False)
    root = args.dir
    if ctx.is_main:
        shutil.rmtree(root, ignore_errors=True)
        os.makedirs(root)
    ctx.barrier()
    width = int((args.params / 4) ** 0.5)
    torch.manual_seed(0)
    net = nn.Sequential(*[nn.Linear(width, width) for _ in range(4)])
    model = (
        ctx.prepare_model(net, strategy="fsdp", shard=nn.Linear)
        if args.strategy == "fsdp"
        else ctx.prepare_model(net)
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    model(torch.randn(2, width)).sum().backward()
    opt.step()  # momentum buffers exist: the checkpoint holds weights and optimizer state
    n_params = sum(t.numel() for t in net.parameters())  # a DTensor counts its global size
    old_file = os.path.join(root, "v01", "shared.pt")
    os.makedirs(os.path.dirname(old_file), exist_ok=True)

    def save_v01() -> None:
        if ctx.is_main:
            state = {
                "format": 1,
                "objects": {"model": ctx.unwrap(model).state_dict(), "optimizer": opt.state_dict()},
            }
            atomic_write(old_file, lambda f: torch.save(state, f))
        atomic_write(
            os.path.join(root, "v01", f"rank_{ctx.rank:05d}.pt"),
            lambda f: torch.save({"rng": rng_state()}, f),
        )
        ctx.barrier()

    def load_v01() -> None:
        file_sha256(old_file)
        state = torch.load(old_file, map_location="cpu", weights_only=True)["objects"]
        ctx.unwrap(model).load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])

    rows: dict[str, list[float]] = {
        k: [] for k in ("0.1 save", "0.1 load", "DCP save", "DCP load", "sync stall", "async stall")
    }
    sync = ctx.checkpointer(os.path.join(root, "dcp"), keep=1, handle_signals=False)
    asyn = ctx.checkpointer(
        os.path.join(root, "async"), keep=1, async_save=True, handle_signals=False
    )
    sync.restore(model=model, optimizer=opt)
    asyn.restore(model=model, optimizer=opt)
    for step in range(1, args.rounds + 1):
        if args.strategy == "ddp":
            rows["0.1 save"].append(timed(ctx, save_v01))
            rows["0.1 load"].append(timed(ctx, load_v01))
        rows["DCP save"].append(timed(ctx, lambda s=step: sync.save(s)))
        rows["sync stall"].append(slowest(ctx, sync.last_stall_s))

        def load_dcp() -> None:
            ctx.checkpointer(os.path.join(root, "dcp"), keep=1, handle_signals=False).restore(
                model=model, optimizer=opt
            )

        rows["DCP load"].append(timed(ctx, load_dcp))
        asyn.save(step)
        rows["async stall"].append(slowest(ctx, asyn.last_stall_s))
        asyn.wait()
        ctx.barrier()
    asyn.close()
    sync.close()
    size = sum(
        os.path.getsize(os.path.join(r, f))
        for r, _, fs in os.walk(os.path.join(root, "dcp"))
        for f in fs
    )
    med = {k: statistics.median(v) for k, v in rows.items() if v}
    if ctx.is_main:
        print(
            f"{args.strategy} on {ctx.world_size} rank(s): {n_params / 1e6:.1f} M params + "
            f"momentum, DCP checkpoint {size / 1e6:.0f} MB, "
            f"{args.rounds} interleaved rounds, medians of the slowest rank"
        )
        for key, value in med.items():
            print(f"  {key:12s} {value * 1000:9.1f} ms")
        if "0.1 save" in med:
            print(f"  DCP / 0.1 save time : {med['DCP save'] / med['0.1 save']:.2f}")
            print(f"  DCP / 0.1 load time : {med['DCP load'] / med['0.1 load']:.2f}")
        print(f"  async / sync stall  : {med['async stall'] / med['sync stall']:.3f}")
        shutil.rmtree(root, ignore_errors=True)
    if dist.is_initialized():
        ctx.barrier()
    ctx.shutdown()


if __name__ == "__main__":
    main()

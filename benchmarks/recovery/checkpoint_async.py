"""Async vs sync checkpointing: training-loop stall per save, and write throughput vs `dd`.

    PYTHONPATH=src python3 benchmarks/recovery/checkpoint_async.py --params 25e6 --rounds 4 \
        --dir /tmp/ckbench

One process, an MLP of about --params parameters with SGD momentum (so a checkpoint holds
about 2 × 4 × params bytes).  Rounds interleave a sync save and an async save; the stall is the
time ``maybe_save``/``save`` keeps the training loop waiting.  Between saves the background
write is allowed to finish (as when saves are further apart than a write takes).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import time

import torch
from torch import nn

import distrain


def dd_bandwidth(directory: str, mbytes: int) -> float:
    """MB/s of `dd` writing `mbytes` MiB with a final fsync (the disk's sequential write)."""
    target = os.path.join(directory, "dd.bin")
    out = subprocess.run(
        ["dd", "if=/dev/zero", f"of={target}", "bs=1M", f"count={mbytes}", "conv=fsync"],
        capture_output=True,
        text=True,
        check=True,
    ).stderr
    os.remove(target)
    m = re.search(r"copied, ([\d.]+) s", out)
    return mbytes * 1.048576 / float(m.group(1)) if m else float("nan")


def main() -> None:
    """Run the interleaved rounds and print one table."""
    p = argparse.ArgumentParser()
    p.add_argument("--params", type=float, default=25e6)
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--dir", default="/tmp/distrain-ckbench")
    args = p.parse_args()
    shutil.rmtree(args.dir, ignore_errors=True)
    os.makedirs(args.dir)
    width = int((args.params / 4) ** 0.5)
    model = nn.Sequential(*[nn.Linear(width, width) for _ in range(4)])
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    model(torch.randn(2, width)).sum().backward()
    opt.step()  # momentum buffers exist: the checkpoint holds weights and optimizer state
    n_params = sum(t.numel() for t in model.parameters())
    ctx = distrain.init(verbose=False)
    sync = ctx.checkpointer(os.path.join(args.dir, "sync"), keep=1, handle_signals=False)
    asyn = ctx.checkpointer(
        os.path.join(args.dir, "async"), keep=1, async_save=True, handle_signals=False
    )
    sync.restore(model=model, optimizer=opt)
    asyn.restore(model=model, optimizer=opt)
    stalls: dict[str, list[float]] = {"sync": [], "async": []}
    write_s: list[float] = []
    dd: list[float] = []
    for step in range(1, args.rounds + 1):
        sync.save(step)
        stalls["sync"].append(sync.last_stall_s)
        t0 = time.perf_counter()
        asyn.save(step)
        stalls["async"].append(asyn.last_stall_s)
        asyn.wait()
        write_s.append(time.perf_counter() - t0)
        dd.append(dd_bandwidth(args.dir, 256))
    size = sum(
        os.path.getsize(os.path.join(r, f))
        for r, _, fs in os.walk(os.path.join(args.dir, "sync"))
        for f in fs
    )
    med = {k: statistics.median(v) for k, v in stalls.items()}
    mb = size / 1e6
    print(
        f"checkpoint: {n_params / 1e6:.1f} M params + momentum = {mb:.0f} MB, {args.rounds} "
        "interleaved rounds (medians)"
    )
    print(
        f"  sync  stall per save : {med['sync'] * 1000:8.1f} ms   ({mb / med['sync']:.0f} MB/s "
        "incl. sha256 + fsync)"
    )
    print(f"  async stall per save : {med['async'] * 1000:8.1f} ms   (snapshot to CPU memory)")
    print(f"  async / sync stall   : {med['async'] / med['sync']:.3f}")
    print(
        f"  async background write: {statistics.median(write_s) * 1000:.1f} ms "
        f"({mb / statistics.median(write_s):.0f} MB/s)"
    )
    print(
        f"  dd bs=1M conv=fsync  : {statistics.median(dd):.0f} MB/s  -> sync save reaches "
        f"{mb / med['sync'] / statistics.median(dd):.2f} of dd"
    )
    sync.close()
    asyn.close()
    shutil.rmtree(args.dir, ignore_errors=True)


if __name__ == "__main__":
    main()

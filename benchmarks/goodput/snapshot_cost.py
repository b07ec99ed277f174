"""What a memory snapshot costs the training loop: none vs synchronous vs background (issue 44).

    python3 benchmarks/goodput/snapshot_cost.py            # small and medium MLP, 3 rounds
    python3 benchmarks/goodput/snapshot_cost.py --rounds 5 --steps 60

One process, no process group (the snapshot's own cost, not the job's), Adam, a snapshot every
step (K=1) into a tmpfs folder (``/dev/shm``).  For each model: the median step time without
the tier, with synchronous snapshots (serialized and written by the loop's thread) and with
background ones (the loop copies the state to reused CPU buffers; a thread serializes and writes
it), in interleaved rounds; and the stall each snapshot put on the loop.  Prints one table.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/common.py
from common import SRC, loadavg  # noqa: E402

sys.path.insert(0, str(SRC))
import torch  # noqa: E402
from torch import nn  # noqa: E402

from distrain.checkpoint import Checkpointer, JobHandles  # noqa: E402
from distrain.checkpoint.handles import NodePlace  # noqa: E402

#: name -> (hidden width, layers): ~0.14 M and ~4.2 M parameters
MODELS = {"small": (256, 2), "medium": (1024, 4)}


def steps(width: int, layers: int, mode: str, n: int, root: str) -> tuple[float, float]:
    """(median step s, median snapshot stall s) of `n` steps in `mode` (none/sync/background)."""
    torch.manual_seed(0)
    mods: list[nn.Module] = [nn.Linear(64, width), nn.ReLU()]
    for _ in range(layers - 1):
        mods += [nn.Linear(width, width), nn.ReLU()]
    model = nn.Sequential(*mods, nn.Linear(width, 10))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    with tempfile.TemporaryDirectory() as disk:
        ckpt = Checkpointer(
            JobHandles(memory=NodePlace(root=root)),
            disk,
            handle_signals=False,
            memory_every_steps=1 if mode != "none" else 0,
        )
        ckpt.restore(model=model, optimizer=opt)
        if ckpt.memory is not None:
            ckpt.memory.background = mode == "background"
        x, y = torch.randn(256, 64), torch.randint(0, 10, (256,))
        times, stalls = [], []
        for step in range(1, n + 1):
            t0 = time.perf_counter()
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            t1 = time.perf_counter()
            ckpt.maybe_save(step)
            t2 = time.perf_counter()
            times.append(t2 - t0)
            stalls.append(t2 - t1)
        if ckpt.memory is not None:
            ckpt.memory.finish(ended_well=True)
        ckpt.close()
    warm = n // 5
    return statistics.median(times[warm:]), statistics.median(stalls[warm:])


def main() -> None:
    """Interleaved rounds per model; one table."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=40)
    args = p.parse_args()
    torch.set_num_threads(1)
    print(f"load before: {loadavg()}")
    root = tempfile.mkdtemp(prefix="dbench-mem-", dir="/dev/shm")
    try:
        for name, (width, layers) in MODELS.items():
            res: dict[str, list[tuple[float, float]]] = {"none": [], "sync": [], "background": []}
            for _ in range(args.rounds):
                for mode in res:
                    res[mode].append(steps(width, layers, mode, args.steps, root))
            base = statistics.median(s for s, _ in res["none"])
            params = width * 64 + (layers - 1) * width * width + width * 10
            print(f"{name} MLP ({params / 1e6:.2f} M params, Adam): step {base * 1e3:.2f} ms")
            for mode in ("sync", "background"):
                step = statistics.median(s for s, _ in res[mode])
                stall = statistics.median(t for _, t in res[mode])
                print(
                    f"  {mode:>10}: step {step * 1e3:.2f} ms ({100 * (step / base - 1):+.1f} %), "
                    f"stall {stall * 1e3:.2f} ms per snapshot"
                )
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"load after: {loadavg()}")


if __name__ == "__main__":
    main()

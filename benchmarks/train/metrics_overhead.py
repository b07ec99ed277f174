"""Step time of the digits CNN with and without per-rank metrics, measured side by side.

    PYTHONPATH=src python3 benchmarks/train/metrics_overhead.py \
        [--rounds 60 --steps 50 --interval 1.0]

Short blocks of `--steps` training steps alternate between "off" (no ``log`` calls) and "on"
(``log(loss=..., lr=..., samples=..., epoch=...)`` every step, as in examples/train_digits.py,
into one Monitor with rank-0 TensorBoard that lives for the whole run); the order flips every
round so drift in the machine's load hits both alike.  Wall time and process CPU time (all
threads: the heartbeat and TensorBoard writers count) are both reported.  The heartbeat's own
cost, which the "off" blocks also carry, is measured separately: CPU time per record written.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/common.py
from common import SRC  # noqa: E402

sys.path.insert(0, str(SRC))
from distrain.monitor import Monitor  # noqa: E402


def make_model() -> nn.Module:
    """The CNN of examples/train_digits.py."""
    return nn.Sequential(
        nn.Conv2d(1, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
        nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(64 * 4 * 4, 128), nn.ReLU(), nn.Linear(128, 10),
    )  # fmt: skip


def block(
    model: nn.Module, opt: torch.optim.Optimizer, steps: int, monitor: Monitor | None
) -> tuple[float, float]:
    """(wall seconds, process CPU seconds) per step over `steps` steps."""
    x, y = torch.rand(32, 1, 8, 8), torch.randint(0, 10, (32,))
    start, cpu = time.perf_counter(), time.process_time()
    for _ in range(steps):
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if monitor is not None:
            monitor.log(loss=loss, lr=opt.param_groups[0]["lr"], samples=len(x), epoch=1)
    return (time.perf_counter() - start) / steps, (time.process_time() - cpu) / steps


def record_cost(run_dir: Path, records: int = 200) -> float:
    """CPU microseconds the writer spends on one record (JSON line, RSS; TensorBoard flush)."""
    mon = Monitor(run_dir / "records", rank=0, world_size=1, interval=3600)
    mon.log(loss=torch.tensor(0.5), lr=0.1, samples=32)  # opens the file, starts the thread
    start = time.thread_time()
    for _ in range(records):
        mon.log(loss=torch.tensor(0.5), lr=0.1, samples=32)
        mon._write("beat")
    elapsed = time.thread_time() - start
    mon.close()
    return elapsed / records * 1e6


def log_call_cost(run_dir: Path, calls: int = 200_000) -> float:
    """Nanoseconds per Monitor.log call in a tight loop (heartbeat thread running)."""
    mon = Monitor(run_dir / "calls", rank=0, world_size=1, tensorboard=False)
    loss = torch.tensor(0.5)
    start = time.perf_counter()
    for _ in range(calls):
        mon.log(loss=loss, lr=0.1, samples=32, epoch=1)
    elapsed = time.perf_counter() - start
    mon.close()
    return elapsed / calls * 1e9


def main() -> None:
    """Run the interleaved comparison and print the results."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=60)
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--interval", type=float, default=1.0, help="metrics interval (s)")
    args = p.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    block(model, opt, 50, None)  # warm-up
    wall: dict[str, list[float]] = {"off": [], "on": []}
    cpu: dict[str, list[float]] = {"off": [], "on": []}
    with tempfile.TemporaryDirectory() as tmp:
        monitor = Monitor(Path(tmp) / "run", rank=0, world_size=1, interval=args.interval)
        for r in range(args.rounds):
            for mode in ("off", "on") if r % 2 == 0 else ("on", "off"):
                w, c = block(model, opt, args.steps, monitor if mode == "on" else None)
                wall[mode].append(w)
                cpu[mode].append(c)
        monitor.close()
        lines = len((Path(tmp) / "run" / "metrics" / "rank-0.jsonl").read_text().splitlines())
        ns = log_call_cost(Path(tmp))
        us_record = record_cost(Path(tmp))
    for name, data in (("wall", wall), ("CPU", cpu)):
        off, on = statistics.median(data["off"]), statistics.median(data["on"])
        pairs = [a / b for a, b in zip(data["on"], data["off"], strict=True)]
        print(f"{name:4s} per step: off {off * 1e3:.3f} ms, on {on * 1e3:.3f} ms; ratio of medians "
              f"{on / off:.4f}; "
              f"median of per-round ratios {statistics.median(pairs):.4f}  ({args.rounds} rounds × "
              f"{args.steps} steps)")  # fmt: skip
    off = statistics.median(cpu["off"])
    print(
        f"one Monitor.log(loss=tensor, lr, samples, epoch) call: {ns:.0f} ns "
        f"({ns / (off * 1e9) * 100:.3f} % of a step's CPU)"
    )
    print(f"one record (heartbeat, every {args.interval:g} s): {us_record:.0f} us CPU = "
          f"{us_record / (args.interval * 1e6) * 100:.3f} % of one core; "
          f"{lines} records written in the run")  # fmt: skip


if __name__ == "__main__":
    main()

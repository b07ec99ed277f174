"""The built-in workload of `distrain bench scaling`: a small CNN on the digits, each step timed.

    distrain run -n 2 src/distrain/tools/bench/study/workload.py --image-size 48 --epochs 3

The training is examples/train_digits.py's (scikit-learn's 1797 digits, a fixed-seed 80/20
split, upsampled to ``--image-size``; two conv layers, SGD, evaluation after each epoch,
``ctx.log`` every step).  What the bench adds: each rank notes when every optimizer step ends
(``time.perf_counter()``, after a device synchronise on GPUs) and, when the job has a run
directory, writes them to ``RUN_DIR/bench/steps-rank-<R>.json``.  The bench times training from
these (:mod:`distrain.tools.bench.study.steps`): warm-up steps, the evaluation and the epoch
boundaries fall outside every timed interval.
"""

from __future__ import annotations

import argparse
import json
import os
import threading
import time
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import TensorDataset

from distrain.tools.bench.study.steps import STEPS_SUBDIR


class Net(nn.Module):
    """Two conv layers and a small head: compute grows with the image area, parameters do not."""

    def __init__(self, width: int = 1) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 32 * width, 3, padding=1),
            nn.BatchNorm2d(32 * width),
            nn.ReLU(),
            nn.Conv2d(32 * width, 64 * width, 3, padding=1),
            nn.BatchNorm2d(64 * width),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(4),
        )
        self.head = nn.Sequential(
            nn.Flatten(), nn.Linear(64 * width * 16, 128), nn.ReLU(), nn.Linear(128, 10)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Logits of a batch of 1-channel images."""
        return self.head(self.features(x))


def digits(image_size: int) -> tuple[TensorDataset, TensorDataset]:
    """(train, test): the digits in [0, 1], upsampled to `image_size`, split 80/20, fixed seed."""
    from sklearn.datasets import load_digits

    raw = load_digits()
    x = torch.tensor(raw.images, dtype=torch.float32).unsqueeze(1) / 16.0
    if image_size != 8:
        x = F.interpolate(x, size=image_size, mode="bilinear", align_corners=False)
    y = torch.tensor(raw.target)
    perm = torch.randperm(len(x), generator=torch.Generator().manual_seed(1234))
    n_test = len(x) // 5
    return TensorDataset(x[perm[n_test:]], y[perm[n_test:]]), TensorDataset(
        x[perm[:n_test]], y[perm[:n_test]]
    )


def thread_cpu() -> dict[str, float]:
    """CPU seconds each thread of this process used so far, by name (Linux /proc; {} elsewhere):
    what a rank spent beside its training loop (``MainThread``).  Python threads go by their
    ``threading`` name, native ones (gloo's, OpenMP's) by their kernel name."""
    names = {t.native_id: t.name for t in threading.enumerate()}
    tick, out = os.sysconf("SC_CLK_TCK"), dict[str, float]()
    for task in Path("/proc/self/task").glob("*"):
        try:
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
            name = names.get(int(task.name)) or (task / "comm").read_text().strip()
        except (OSError, ValueError):
            continue  # a thread that ended meanwhile
        out[name] = out.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / tick
    return out


class StepClock:
    """When each optimizer step ended, with its epoch and this rank's samples."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"
        self.steps: list[list[Any]] = []

    def tick(self, epoch: int, samples: int) -> None:
        """Note a step of `samples` samples just ended (waits for the GPU: the bench times work)."""
        if self.cuda:
            torch.cuda.synchronize()
        self.steps.append([epoch, time.perf_counter(), samples])

    def write(self, run_dir: str | None, rank: int, world_size: int) -> None:
        """``RUN_DIR/bench/steps-rank-<R>.json`` (nothing without a run directory)."""
        if not run_dir:
            return
        path = Path(run_dir) / STEPS_SUBDIR / f"steps-rank-{rank}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(
            json.dumps(
                {
                    "rank": rank,
                    "world_size": world_size,
                    "steps": self.steps,
                    "thread_cpu_s": thread_cpu(),
                }
            ),
            encoding="utf-8",
        )


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument(
        "--batch-size",
        type=int,
        default=32,
        help="per process; the global batch is this × processes",
    )
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--image-size",
        type=int,
        default=32,
        help="the 8×8 digits upsampled (compute grows with the area)",
    )
    p.add_argument("--width", type=int, default=1, help="channel multiplier of the CNN")
    p.add_argument("--sync-bn", action="store_true", help="batch statistics across all processes")
    p.add_argument(
        "--out", default=None, help="accepted for the bench's calling convention; nothing is saved"
    )
    return p


def main(argv: list[str] | None = None) -> None:
    """Train, log every step through ctx.log, and write this rank's step times."""
    import distrain

    args = _parser().parse_args(argv)
    train_set, test_set = digits(args.image_size)
    ctx = distrain.init()
    torch.manual_seed(args.seed)
    model = ctx.prepare_model(Net(args.width), sync_bn=args.sync_bn)
    loader = ctx.prepare_loader(train_set, batch_size=args.batch_size, seed=args.seed)
    test_loader = ctx.prepare_eval_loader(test_set, batch_size=256)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    clock = StepClock(ctx.device)
    for epoch in range(1, args.epochs + 1):
        for xb, yb in loader:
            xb, yb = xb.to(ctx.device), yb.to(ctx.device)
            loss = F.cross_entropy(model(xb), yb)
            opt.zero_grad(set_to_none=True)
            ctx.backward(loss)
            ctx.step(opt)
            clock.tick(epoch, len(xb))
            ctx.log(loss=loss, samples=len(xb), epoch=epoch)
        net = ctx.unwrap(model).eval()
        totals = torch.zeros(3, dtype=torch.float64)  # loss sum, correct, count
        with torch.no_grad():
            for xb, yb in test_loader:
                logits = net(xb.to(ctx.device)).float().cpu()
                totals += torch.tensor(
                    [
                        F.cross_entropy(logits, yb, reduction="sum").item(),
                        (logits.argmax(1) == yb).sum().item(),
                        len(yb),
                    ],
                    dtype=torch.float64,
                )
        net.train()
        loss_sum, correct, count = ctx.all_reduce(totals).tolist()
        ctx.log(advance=False, accuracy=correct / count, test_loss=loss_sum / count)
        ctx.print(f"epoch {epoch}/{args.epochs}  test acc {correct / count:.4f}")
    clock.write(ctx.settings.run_dir, ctx.rank, ctx.world_size)
    ctx.shutdown()


if __name__ == "__main__":
    main()

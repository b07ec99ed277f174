"""What per-sample seeding (distrain.data.sample_seeds) costs a DataLoader, per sample and batch.

    python3 benchmarks/train/sample_seed_cost.py --batches 300

Reads the same augmenting dataset (a 3x32x32 random crop + flip + noise per sample, cheap next to
decoding a JPEG) through ``DistributedLoader`` with ``seed_samples`` on and off, with 0 and 2
workers, interleaved round by round, and prints microseconds per sample and the ratio on/off.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

import torch
from torch.utils.data import Dataset

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from common import loadavg  # noqa: E402

from distrain.data.sampler import DistributedLoader, GlobalBatchSampler  # noqa: E402

BATCH = 32


class Augmented(Dataset):
    def __init__(self, n: int) -> None:
        self.x = torch.randn(n, 3, 36, 36)

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> torch.Tensor:
        top, left = (int(v) for v in torch.randint(0, 5, (2,)))
        img = self.x[i, :, top : top + 32, left : left + 32]
        return (img.flip(2) if random.random() < 0.5 else img) + 0.01 * torch.randn(3, 32, 32)


def per_sample_us(seeded: bool, workers: int, batches: int) -> float:
    ds = Augmented(batches * BATCH)
    loader = DistributedLoader(
        ds, GlobalBatchSampler(len(ds), BATCH, seed=1), seed_samples=seeded, num_workers=workers
    )
    it = iter(loader)
    next(it)  # workers started, first batch out of the way
    t0 = time.perf_counter()
    n = sum(1 for _ in it)
    return (time.perf_counter() - t0) / (n * BATCH) * 1e6


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batches", type=int, default=300)
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    torch.set_num_threads(1)
    print(f"load before {loadavg()}")
    for workers in (0, 2):
        on, off = [], []
        for _ in range(args.rounds):
            off.append(per_sample_us(False, workers, args.batches))
            on.append(per_sample_us(True, workers, args.batches))
        print(
            f"num_workers={workers}: seeded {statistics.median(on):.1f} µs/sample, unseeded "
            f"{statistics.median(off):.1f} µs/sample, "
            f"ratio {statistics.median(a / b for a, b in zip(on, off, strict=True)):.3f} (rounds: "
            + ", ".join(f"{a / b:.3f}" for a, b in zip(on, off, strict=True))
            + ")"
        )
    print(f"load after {loadavg()}")


if __name__ == "__main__":
    main()

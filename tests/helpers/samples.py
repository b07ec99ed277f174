"""What an elastic job trained on, rebuilt from tests/scripts/elastic_samples.py's log.

The log holds, in order, a header per (re)start (``resumed``: the checkpoint's step) and one
record per optimizer step (the samples of every rank).  A restart rolls back to its checkpoint:
the steps a killed attempt made after it were trained again, so they are dropped here.  What is
left is what the final model learned from, step by step.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch


def committed(log: Path) -> tuple[list[dict], list[dict]]:
    """(the step records the job's result stands on, the headers of every start)."""
    steps: list[dict] = []
    starts: list[dict] = []
    for line in log.read_text().splitlines():
        entry = json.loads(line)
        if "resumed" in entry:
            starts.append(entry)
            steps = [s for s in steps if s["step"] <= entry["resumed"]]
        else:
            steps.append(entry)
    return steps, starts


def check_epochs(log: Path, samples: int, epochs: int, seed: int = 3) -> list[dict]:
    """Assert every epoch trained on its permutation's samples in order, each exactly once.

    Only a tail shorter than the epoch's last global batch may be missing.  Returns the step
    records (the caller checks the world sizes they saw).
    """
    steps, _ = committed(log)
    assert [s["step"] for s in steps] == list(range(1, len(steps) + 1)), "steps lost or repeated"
    for epoch in range(epochs):
        mine = [s for s in steps if s["epoch"] == epoch]
        assert mine, f"epoch {epoch} never trained"
        seen = [i for s in mine for i in s["samples"]]
        order = torch.randperm(samples, generator=torch.Generator().manual_seed(seed + epoch))
        assert len(seen) == len(set(seen)), f"epoch {epoch}: a sample trained twice"
        assert seen == order.tolist()[: len(seen)], f"epoch {epoch}: not the epoch's order"
        assert samples - len(seen) < mine[-1]["global_batch"], f"epoch {epoch}: samples skipped"
    return steps


def batches_in_epoch(steps: list[dict], epoch: int) -> list[int]:
    """The global batches epoch `epoch` was trained with, in order, each once."""
    out: list[int] = []
    for s in steps:
        if s["epoch"] == epoch and (not out or out[-1] != s["global_batch"]):
            out.append(s["global_batch"])
    return out

"""What one test run computes once for all its xdist workers: references, baselines.

A reference run (the idiom's script under its own launcher, an uninterrupted checkpoint job)
is a real job of several seconds; the cells that compare with it are spread over the workers,
so a per-process cache still runs it once per worker.  :func:`once` runs it once per test run:
the first worker to ask makes it under a lock, the others wait for it and read it.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Callable
from pathlib import Path

import pytest


def run_dir(factory: pytest.TempPathFactory) -> Path:
    """A folder of this test run that every xdist worker of it shares, and no other run."""
    base = factory.getbasetemp()
    # under xdist each worker's base is <run>/popen-gwN: <run> is this run's own; without it,
    # base's parent holds every earlier run's folder too
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def once(factory: pytest.TempPathFactory, name: str, make: Callable[[Path], str]) -> str:
    """`make(folder)`'s text, computed by the first worker of this run that asks for `name`."""
    root = run_dir(factory) / "once"
    root.mkdir(exist_ok=True)
    done = root / f"{name}.txt"
    with open(root / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            folder = root / name
            folder.mkdir(exist_ok=True)  # a failed try of an earlier test left it
            done.write_text(make(folder))
    return done.read_text()

"""Watching a job: per-rank metrics files, rank-0 TensorBoard scalars, and `distrain top`.

Layout of a run directory::

    RUN_DIR/metrics/rank-<R>.jsonl   one JSON record per line, about one per second per rank
    RUN_DIR/tensorboard/             rank 0's event files (loss, accuracy, lr, throughput, ...)
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from distrain.monitor.recorder import Monitor, rank_file


def open_monitor(
    run_dir: str | Path | None,
    rank: int,
    world_size: int,
    gpu_index: int | None,
    interval: float | None = None,
    breakdown: Any = None,
    *,
    attempt: int = 0,
    visible_devices: str | None = None,
) -> Monitor | None:
    """A Monitor for this rank given a run directory (init(): argument, else DISTRAIN_RUN_DIR).

    Without a run directory nothing is recorded, and the recorder (and its probes) is not
    imported: a worker of a run without ``--run-dir`` has no use for it.
    """
    if run_dir is None:
        return None
    from distrain.monitor.recorder import Monitor

    return Monitor(
        run_dir,
        rank,
        world_size,
        gpu_index=gpu_index,
        interval=interval,
        breakdown=breakdown,
        attempt=attempt,
        visible_devices=visible_devices,
    )


def __getattr__(name: str) -> Any:
    """The recorder's names, imported on first use (PEP 562)."""
    if name not in ("Monitor", "rank_file"):
        raise AttributeError(f"module 'distrain.monitor' has no attribute {name!r}")
    return getattr(importlib.import_module("distrain.monitor.recorder"), name)


__all__ = ["Monitor", "open_monitor", "rank_file"]

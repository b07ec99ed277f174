"""Watching a job: per-rank metrics files, rank-0 TensorBoard scalars, and `distrain top`.

Layout of a run directory::

    RUN_DIR/metrics/rank-<R>.jsonl   one JSON record per line, about one per second per rank
    RUN_DIR/tensorboard/             rank 0's event files (loss, accuracy, lr, throughput, ...)
"""

from __future__ import annotations

from distrain.monitor.recorder import Monitor, open_monitor, rank_file

__all__ = ["Monitor", "open_monitor", "rank_file"]

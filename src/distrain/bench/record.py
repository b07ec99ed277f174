"""The scaling-bench contract on the script side: one JSON line per epoch, written by rank 0.

`distrain bench scaling` sets ``DISTRAIN_BENCH_LOG`` to a file path in each run's environment.
A script that calls :func:`log_epoch` once per epoch is then measured; without the variable the
call does nothing, so the script runs unchanged outside the bench.  Fields (see docs/bench.md):
``epoch`` (1-based), ``seconds`` (training time of the epoch, evaluation excluded), ``samples``
(training samples of the epoch over all ranks), optional ``test_acc`` in [0, 1], ``test_loss``,
``train_loss``; ``max_rss_mb`` (this process's peak resident memory) and, on a GPU,
``max_gpu_mem_mb`` (torch's peak allocated CUDA memory) are added automatically.
"""

from __future__ import annotations

import json
import os
import resource
import sys
from typing import Any

#: environment variable naming the JSON-lines file
ENV_VAR = "DISTRAIN_BENCH_LOG"


def peak_rss_mb() -> float:
    """This process's peak resident set size in MiB (ru_maxrss: KiB on Linux, bytes on macOS)."""
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss / (1024 * 1024) if sys.platform == "darwin" else rss / 1024


def log_epoch(ctx: Any = None, **fields: Any) -> None:
    """Append one epoch record to ``$DISTRAIN_BENCH_LOG`` on rank 0; a no-op when it is unset.

    ``ctx`` is the distrain Context (only rank 0 writes); None means "this process writes".
    Values must be JSON-serialisable numbers or strings.
    """
    path = os.environ.get(ENV_VAR)
    if not path or (ctx is not None and not getattr(ctx, "is_main", True)):
        return
    record = dict(fields)
    record.setdefault("max_rss_mb", round(peak_rss_mb(), 1))
    torch = sys.modules.get("torch")  # only if the script uses it; never imported here
    if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
        record.setdefault("max_gpu_mem_mb", round(torch.cuda.max_memory_allocated() / 2**20, 1))
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(record) + "\n")
        f.flush()  # the bench shows progress by reading this file while the run goes on

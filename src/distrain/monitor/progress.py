"""Rank 0's progress bar over a prepared loader's epoch (rich's Progress), like the tutorials' tqdm.

On when rank 0's stdout is a terminal and no CI variable is set; off in pipes, files and CI,
where a bar's redraws would only fill the log.  ``DISTRAIN_PROGRESS=1`` or ``0`` decides instead
(docs/environment.md; the choice is worker/services.py's ``progress_wanted``: a worker without a
bar does not import this module).  The bar is transient: it is gone at the end of each epoch, so the
script's own epoch line follows the previous one; what the script prints meanwhile appears
above it.  Only prepared training loaders (``ctx.prepare_loader``) get one.
"""

from __future__ import annotations

import sys
from typing import Any


class EpochBar:
    """One transient bar per epoch: ``epoch 2  ━━━━━━━━━━╺━━━━━  12/22  0:00:02 · 0:00:01``.

    The epoch is numbered as the loader counts it, from 0: what ``for epoch in range(n)`` and
    ``sampler.set_epoch(epoch)`` hold, so the bar and the script's own ``epoch {epoch}`` line
    agree."""

    def __init__(self) -> None:
        self._progress: Any = None
        self._task: Any = None

    def start(self, epoch: int, done: int, total: int) -> None:
        """Show the bar for `epoch` (0-based, shown so), `done` of `total` steps done."""
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self.stop()
        self._progress = Progress(
            TextColumn(f"epoch {epoch}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("·"),
            TimeRemainingColumn(),
            console=Console(file=sys.stdout),
            transient=True,
        )
        self._task = self._progress.add_task("", total=total, completed=done)
        self._progress.start()

    def advance(self) -> None:
        """One more step of the epoch."""
        if self._progress is not None:
            self._progress.advance(self._task)

    def stop(self) -> None:
        """Remove the bar (the end of the epoch, or a loop left early)."""
        if self._progress is not None:
            progress, self._progress = self._progress, None
            progress.stop()

"""Rank 0's TensorBoard scalars, through torch.utils.tensorboard when it is installed."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any


class ScalarWriter:
    """A thin wrapper over SummaryWriter that only knows scalars."""

    def __init__(self, writer: Any) -> None:
        self._writer = writer

    @classmethod
    def open(cls, log_dir: Path) -> ScalarWriter | None:
        """A writer into `log_dir`, or None when tensorboard is not installed."""
        try:
            from torch.utils.tensorboard import SummaryWriter
        except Exception:  # tensorboard missing (ImportError) or broken: metrics files still work
            return None
        return cls(SummaryWriter(log_dir=str(log_dir)))

    def scalar(self, tag: str, value: float, step: int) -> None:
        """Add one point to the curve `tag`."""
        self._writer.add_scalar(tag, value, step)

    def flush(self) -> None:
        """Push queued events to disk."""
        self._writer.flush()

    def close(self) -> None:
        """Flush and close the event file."""
        with contextlib.suppress(Exception):
            self._writer.close()

"""The training layer: the one seam through which a job-level feature changes the Context.

The core Context (worker/context.py) and Checkpointer (checkpoint/checkpointer.py) name no
feature.  What a feature changes in training goes through the Context's :class:`Layer`: which
step is the training's, who prints, how a model's strategy is prepared (decorated,
parallel/options.py), how the data is split, whether an optimizer step is applied, which
checkpointer is made, what runs once the Context is current, and what ends with it.  This base
changes nothing; `init()` puts a feature's own layer in place through the worker's seam
(worker/start/__init__.py).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from distrain.checkpoint import Checkpointer, JobHandles, NoDisk
    from distrain.parallel.options import Decorated, Strategy


class Layer:
    """What a feature may change in the Context's training; here, nothing (a plain job)."""

    def committed_step(self) -> int | None:
        """The job's step when the feature decides it (None: the Context counts its own)."""
        return None

    def is_main(self, rank: int) -> bool:
        """Whether the process of `rank` is the one that prints."""
        return rank == 0

    def decorate(self, spec: Strategy) -> Strategy | Decorated:
        """The strategy a model is prepared with, given the script's own."""
        return spec

    def data_rank(self, rank: int, world: int) -> tuple[int, int]:
        """(shard, shards) of the data for this process."""
        return rank, world

    def step(self, apply: Callable[[], None]) -> bool:
        """Apply an optimizer step; whether the training's state moved on."""
        apply()
        return True

    def checkpointer(
        self, directory: str | os.PathLike[str] | None, handles: JobHandles, **options: Any
    ) -> Checkpointer | NoDisk:
        """The checkpointer of `directory` (None: one that saves nothing)."""
        from distrain.checkpoint import Checkpointer, NoDisk

        if directory is None:
            return NoDisk(handles, **options)
        return Checkpointer(handles, directory, **options)

    def started(self, shutdown: Callable[[], None]) -> None:
        """Once the Context is current and `shutdown` (its end) is registered with ``atexit``."""

    def close(self) -> None:
        """End what the feature runs (with the Context's shutdown)."""


#: the layer of a job no feature changes
PLAIN = Layer()

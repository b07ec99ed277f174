"""Checkpointers whose restore also heals from a live peer (a :class:`~.handles.Healer`).

Under `distrain run --replicas` the healer is the process's replica group
(worker/replicas/training.py): each group saves into a folder of its own, a restore joins the
groups' quorum and copies a live group's state when one is ahead, the checkpoint's loader
positions are those of the last committed step, and `distrain run`'s resume mark is the groups'
launcher's business, not a node's.  The core :class:`~.checkpointer.Checkpointer` and
:class:`~.nodisk.NoDisk` know none of it.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from distrain.checkpoint.checkpointer import Checkpointer
from distrain.checkpoint.handles import Healer, JobHandles, Resumed
from distrain.checkpoint.nodisk import NoDisk


class HealedCheckpointer(Checkpointer):
    """A :class:`Checkpointer` in the healer's own folder of `directory`, healed after the disk."""

    def __init__(
        self, healer: Healer, handles: JobHandles, directory: str | os.PathLike[str], **options: Any
    ) -> None:
        self.healer = healer
        handles = dataclasses.replace(handles, stuck=healer.stuck)  # a stop waits for no dead peer
        super().__init__(handles, healer.checkpoint_dir(os.fspath(directory)), **options)

    def _after_disk(self, resumed: Resumed) -> Resumed:
        return self.healer.restore(self.objects, resumed)

    def mark(self, step: int | None, path: str) -> None:
        """No resume mark: a restarted process resumes from a live peer, or its own folder."""

    def agreed_state(self) -> dict[str, Any]:
        """The loader positions of the last committed step (the peers agree on those only)."""
        return dict(self.healer.committed_positions)


class HealedNoDisk(NoDisk):
    """A :class:`NoDisk` whose restore heals the registered state from a live peer."""

    def __init__(self, healer: Healer, handles: JobHandles, **options: Any) -> None:
        super().__init__(handles, **options)
        self.healer = healer

    def restore(self, **objects: Any) -> Resumed:
        """Register `objects` and heal them from a live peer that is ahead."""
        super().restore(**objects)
        with self.handles.uncounted():  # a heal loads optimizer state: one uncounted step
            healed = self.healer.restore(self.objects, Resumed())
        return self.handles.resumed(healed)

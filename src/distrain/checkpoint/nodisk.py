"""``ctx.checkpointer(None)``: a checkpointer without a directory.

It saves nothing.  Its ``restore(...)`` registers the training state all the same, so where
a live peer holds it (checkpoint/healed.py: under `distrain run --replicas`, a live group) a
replacement copies all of it (model, optimizer, scheduler, loader position) and gets the peer's
step back, as with a directory; alone it returns step 0.  A script can then call
``ckpt.restore`` and ``ckpt.maybe_save`` whether or not the user gave a directory.
"""

from __future__ import annotations

from typing import Any

from distrain.checkpoint.handles import JobHandles, Resumed
from distrain.checkpoint.state import register


class NoDisk:
    """The Checkpointer's interface with nothing written: restore() only registers (and heals)."""

    def __init__(self, handles: JobHandles, **_options: Any) -> None:
        self.handles = handles
        self.objects: dict[str, Any] = {}
        self.extra: dict[str, Any] = {}

    def restore(self, **objects: Any) -> Resumed:
        """Register `objects` (step 0: nothing to load; checkpoint/healed.py heals them)."""
        register(self.objects, objects, self.handles.scaler)
        return Resumed()

    def maybe_save(self, step: int) -> bool:
        """Nothing to save: False."""
        return False

    def save(self, step: int, wait: bool | None = None) -> None:
        """Nothing to save."""

    def wait(self) -> None:
        """Nothing pending."""

    def close(self) -> None:
        """Nothing to release."""

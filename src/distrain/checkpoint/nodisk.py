"""``ctx.checkpointer(None)``: a checkpointer without a directory.

It saves nothing.  Its ``restore(...)`` registers the training state all the same, so under
`distrain run --replicas` a replacement copies all of it from a live group (model, optimizer,
scheduler, loader position) and gets the live group's step back, as with a directory; without
``--replicas`` it returns step 0.  A script can then call ``ckpt.restore`` and
``ckpt.maybe_save`` whether or not the user gave a directory.
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
        """Register `objects`; under ``--replicas`` heal them from a live group that is ahead."""
        register(self.objects, objects, self.handles.scaler)
        if self.handles.replicas is not None:
            with self.handles.uncounted():  # a heal loads optimizer state: one uncounted step
                healed = self.handles.replicas.restore(self.objects, Resumed())
            return self.handles.resumed(healed)
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

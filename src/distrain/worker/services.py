"""What runs beside one worker's training loop: the metrics recorder, the watchdog, the step
breakdown, rank 0's progress bar.

init() starts them and hands them to its Context as ``ctx.services``; the Context feeds them
(``ctx.log``, every optimizer step) and stops them in ``ctx.shutdown()``.
"""

from __future__ import annotations

import contextlib
import sys
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from distrain.data.sampler import DistributedLoader
    from distrain.monitor import Monitor
    from distrain.monitor.breakdown import StepBreakdown
    from distrain.worker.lifecycle.watchdog import Watchdog


def progress_wanted(setting: bool | None, is_main: bool) -> bool:
    """Whether this process shows a bar: rank 0 only; `setting` (``Settings.progress``:
    DISTRAIN_PROGRESS, or off in CI) if decided, else when stdout is a terminal."""
    if not is_main:
        return False
    if setting is not None:
        return setting
    try:
        return sys.stdout.isatty()
    except (AttributeError, ValueError):  # replaced or closed stdout
        return False


@dataclass
class Services:
    """A Context's helpers; each is None when it is off."""

    #: per-rank metrics for `distrain top` and TensorBoard (on when a run directory is set)
    monitor: Monitor | None = None
    #: aborts with every rank's stack when no step completes in time (on with watchdog_seconds)
    watchdog: Watchdog | None = None
    #: where each step's time goes, fed by the Context's hook points (on unless
    #: DISTRAIN_BREAKDOWN=0)
    breakdown: StepBreakdown | None = None
    #: rank 0's progress bar over prepared loaders (monitor/progress.py: DISTRAIN_PROGRESS, a
    #: terminal)
    progress: bool = False
    #: bound methods (held weakly) run first in close(): a checkpointer finishes its background
    #: save and lets go of its process group before the groups are destroyed
    closers: list[weakref.WeakMethod[Callable[[], None]]] = field(default_factory=list)
    #: the step a restore or a heal resumed the training at (0 on a fresh start)
    resumed_step: int = 0

    def watch_loader(self, loader: DistributedLoader) -> DistributedLoader:
        """A prepared training loader: the breakdown times its batches, rank 0 shows its bar."""
        if self.breakdown is not None:
            self.breakdown.watch_loader(loader)
        if self.progress:
            from distrain.monitor.progress import EpochBar

            loader.bar = EpochBar()
        return loader

    def checkpoint_stall(self, seconds: float) -> None:
        """A save stalled the training loop `seconds`: the step breakdown counts it."""
        if self.breakdown is not None:
            self.breakdown.checkpoint(seconds)

    def resumed_at(self, step: int) -> None:
        """A restore or a heal resumed the training at `step`: the monitor and the watchdog
        report steps counted over the whole training, not since this process started."""
        self.resumed_step = step
        if self.monitor is not None:
            self.monitor.resumed_at(step)
        if self.watchdog is not None:
            self.watchdog.resumed_at(step)

    def on_close(self, method: Callable[[], None]) -> None:
        """Run the bound `method` in close(), before the process groups are destroyed.

        Held weakly: an object that is gone by then is skipped, not kept alive for its hook.
        """
        self.closers.append(weakref.WeakMethod(method))

    def close(self) -> None:
        """Stop them: registered closers run, the monitor writes its last record, the breakdown
        removes its hooks and leaves its summary for the launcher, the watchdog waits for the
        other ranks' ends (worker/lifecycle/watchdog.py, ``Watchdog.finish``) and stops."""
        for ref in self.closers:
            method = ref()
            if method is not None:
                with contextlib.suppress(Exception):  # shutdown goes on: the group must still die
                    method()
        self.closers.clear()
        if self.monitor is not None:
            self.monitor.close()
        if self.breakdown is not None:  # after the monitor's last record, which reads it
            self.breakdown.finish()
        if self.watchdog is not None:
            from distrain.worker.lifecycle.failure import failing

            # a normal end waits, watching, until every rank ended (a peer frozen after its
            # training is named, not waited for forever); a failing rank leaves at once
            self.watchdog.finish(linger=not failing())

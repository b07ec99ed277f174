"""One step counter: optimizer steps of prepared models, however the script takes them.

Scripts step with ``ctx.step(opt)``, with ``opt.step()``, through a GradScaler or a scheduler
wrapper: torch calls every global optimizer step hook in all of these cases, so the count (and
with it the watchdog, the tighter collective timeout, ``distrain top`` and ``ctx.log``'s default
step) sees every one.  Only optimizers that update a model given to ``ctx.prepare_model`` count:
an auxiliary optimizer (a GAN's second net, a probe) is not the training's progress.
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import nn
from torch.optim.optimizer import register_optimizer_step_post_hook

#: step counters paused now in this process (a restore's optimizer-state steps are under way)
_pauses = 0


def steps_paused() -> bool:
    """Whether optimizer steps taken now are not the training's (a restore creating their state)."""
    return _pauses > 0


class StepCounter:
    """Counts optimizer steps over the parameters of tracked models; calls `on_step(count)`."""

    def __init__(self, on_step: Callable[[int], None]) -> None:
        self.count = 0
        self._paused = False
        self._on_step = on_step
        self._params: set[int] = set()
        # optimizer → whether it updates a tracked model (decided at its first step)
        self._verdicts: weakref.WeakKeyDictionary[torch.optim.Optimizer, bool] = (
            weakref.WeakKeyDictionary()
        )
        self._handle = register_optimizer_step_post_hook(self._hook)

    def track(self, model: nn.Module) -> None:
        """Count steps of optimizers that update `model`'s parameters (as after wrapping)."""
        self._params.update(id(p) for p in model.parameters())
        self._verdicts = weakref.WeakKeyDictionary()  # an optimizer made earlier may now qualify

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """Steps taken inside are not the training's: a restore's loading of optimizer state
        steps every optimizer once with a zero learning rate to create its state (torch's
        ``_init_optim_state``), which counted as step 1 and armed the watchdog early."""
        global _pauses
        self._paused = True
        _pauses += 1
        try:
            yield
        finally:
            self._paused = False
            _pauses -= 1

    def _hook(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        if self._paused:
            return
        verdict = self._verdicts.get(optimizer)
        if verdict is None:
            verdict = any(
                id(p) in self._params for group in optimizer.param_groups for p in group["params"]
            )
            self._verdicts[optimizer] = verdict
        if verdict:
            self.advance()

    def advance(self) -> None:
        """Count one step (also for a step the GradScaler skipped: the loop still moved on)."""
        self.count += 1
        self._on_step(self.count)

    def close(self) -> None:
        """Stop counting (the hook is global to the process)."""
        self._handle.remove()

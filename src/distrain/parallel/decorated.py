"""A strategy decorated by a job-level feature: the feature prepares the model around it.

``distrain run --replicas`` is one: inside a replica group the script's own strategy (DDP or
FSDP), across the groups TorchFT's fault-tolerant average (worker/replicas/models.py).  The
core Context resolves the script's strategy, lets its training layer decorate it
(worker/layer.py), and :func:`distrain.parallel.prepare` hands a decorated one to the feature.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from distrain.parallel.options import Strategy


@dataclass(frozen=True)
class Decorated:
    """The script's strategy (`inner`) with the feature's own preparation (`prepare_with`)."""

    inner: Strategy
    prepare_with: Callable[[nn.Module, torch.device, Strategy], nn.Module]

    def prepare(self, model: nn.Module, device: torch.device) -> nn.Module:
        """`model` prepared by the feature, around the script's strategy."""
        return self.prepare_with(model, device, self.inner)

"""The end of a worker's distributed state, while Python is still fully alive."""

from __future__ import annotations

import contextlib
import gc
import weakref

import torch.distributed as dist
from torch import nn


def release(models: list[weakref.ref[nn.Module]]) -> None:
    """Free the prepared models' DDP/FSDP state, then destroy the process group.

    The group's C++ object (and its threads) must die here, not at interpreter teardown, where
    gloo aborts or deadlocks on the GIL.
    """
    from distrain.parallel import release as release_model

    for ref in models:
        model = ref()
        if model is not None:
            with contextlib.suppress(Exception):
                release_model(model)
    models.clear()
    if dist.is_available() and dist.is_initialized():
        with contextlib.suppress(Exception):
            dist.destroy_process_group()
    gc.collect()

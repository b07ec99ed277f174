"""The components a Context builds for its script, each from explicit parts: checkpointers.

A component receives the frozen :class:`~distrain.process.info.ProcessInfo` and the handles
and callbacks it uses, never the Context: checkpoint/ does not reach back into worker/.
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

import torch

from distrain.checkpoint import Checkpointer, JobHandles, NoDisk
from distrain.checkpoint.handles import NodePlace
from distrain.process.info import ProcessInfo
from distrain.settings import Settings
from distrain.worker.layer import PLAIN, Layer
from distrain.worker.lifecycle.failure import exit_abandoned, failing
from distrain.worker.services import Services
from distrain.worker.start.store import shared_store

#: the prefix of the checkpoint writers' keys in the default group's store
CHECKPOINT_STORE_PREFIX = "distrain/ckpt"


def checkpointer(
    directory: str | os.PathLike[str] | None,
    process: ProcessInfo,
    *,
    is_main: bool,
    scaler: torch.amp.GradScaler | None,
    settings: Settings,
    layer: Layer = PLAIN,
    services: Services,
    shutdown: Callable[[], None],
    uncounted: Callable[[], AbstractContextManager[None]] = contextlib.nullcontext,
    **options: Any,
) -> Checkpointer | NoDisk:
    """A Checkpointer saving to `directory` (None: a NoDisk) with what it needs of the job; the
    job's training layer makes it (a feature's own checkpointer: worker/layer.py).

    The exit after a save abandoned by the writer is the lifecycle's (worker/lifecycle/failure.py).
    """
    handles = JobHandles(
        process=process,
        is_main=is_main,
        scaler=scaler,
        store=functools.partial(shared_store, CHECKPOINT_STORE_PREFIX)
        if process.distributed
        else None,
        job_dir=settings.job_dir,
        slurm_job_id=settings.slurm_job_id,
        on_close=services.on_close,
        on_stall=services.checkpoint_stall,
        shutdown=shutdown,
        on_abandoned=exit_abandoned,
        on_resumed=services.resumed_at,
        uncounted=uncounted,
        memory=memory_place(settings),
        failing=failing,
    )
    return layer.checkpointer(directory, handles, **options)


def memory_place(settings: Settings) -> NodePlace:
    """Where the memory tier lives on this node, owned by the node's launcher (or torch's agent,
    under torchrun): snapshots whose owner is gone are an ended job's."""
    owner = int(settings.launcher_pid) if settings.launcher_pid else os.getppid()
    return NodePlace(root=settings.memory_dir or "/dev/shm", owner_pid=owner)

"""What a checkpointer takes from the job around it, given explicitly: :class:`JobHandles`.

The Context builds one (``ctx.checkpointer``); a test or an embedding program can build one from a
:class:`~distrain.process.info.ProcessInfo` alone.  Nothing here reaches back into the Context.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, NoReturn, Protocol

import torch
import torch.distributed as dist

from distrain.checkpoint.files import SaveAbandoned
from distrain.process.info import ProcessInfo


@dataclass
class Resumed:
    """What restore() found: ``step`` (0 on a fresh start), the checkpoint path, user ``extra``."""

    step: int = 0
    path: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def fresh(self) -> bool:
        """True when no checkpoint was loaded."""
        return self.path is None


class Healer(Protocol):
    """What a checkpointer asks of `run --replicas`'s groups (worker/replicas/training.py)."""

    def checkpoint_dir(self, directory: str) -> str:
        """This group's own folder inside `directory`."""
        ...

    #: each loader's position at the last committed step: saved in place of the live one
    committed_positions: dict[str, Any]

    def stuck(self) -> bool:
        """Whether this process waits on a replica-group peer that is gone."""
        ...

    def restore(self, objects: dict[str, Any], resumed: Resumed) -> Resumed:
        """After a disk restore: heal `objects` from a live group that is ahead."""
        ...


@dataclass(frozen=True)
class NodePlace:
    """Where the memory tier (checkpoint/memory_tier/) keeps snapshots on this node, and who owns
    them: the job lives while its owner (the node's launcher, or torch's agent) does."""

    root: str = "/dev/shm"  # DISTRAIN_MEMORY_DIR
    owner_pid: int = field(default_factory=os.getpid)

    def folder(self, directory: str) -> str:
        """The folder of the job checkpointing to `directory`: the same for every rerun of it."""
        key = hashlib.sha256(os.path.realpath(directory).encode()).hexdigest()[:16]
        return os.path.join(self.root, f"distrain-mem-{key}")


def _never() -> bool:
    return False


def _ignore(_method: Callable[[], None]) -> None:
    """No owner to call `_method` at shutdown: the caller closes the checkpointer itself."""


@dataclass(frozen=True)
class JobHandles:
    """The process, handles, settings and callbacks a checkpointer uses (default: a plain process).

    - ``process``: rank, world, node, device, backend; its collectives run over the default group.
    - ``is_main``: whether this is the process that prints (None: rank 0; under ``--replicas``
      the Context's layer may say one group's rank 0 only).
    - ``scaler``: the fp16 GradScaler, saved with the state.
    - ``store``: returns a store every rank of the default group shares (writers report their
      files there), asked at each save; None without a process group.  A function, not the
      store: a store held past ``destroy_process_group`` keeps rank 0's server thread alive
      into interpreter teardown (tests/scripts/exit_threads.py).
    - ``job_dir``: the job's folder, whose event stream the node's checkpoint leader tells
      `distrain run` the step a restart resumes from (``DISTRAIN_JOB_DIR``); None: not told.
    - ``slurm_job_id``: the SLURM job a stop signal may requeue (``SLURM_JOB_ID``); None: not
      under SLURM (SIGUSR1 then stays the watchdog's stack dump).
    - ``stuck``: whether this process waits on a peer that is gone (a stop signal then exits
      without the save it would wait for); None: never.
    - ``on_close``: registers a method to run before the process groups are destroyed.
    - ``on_stall``: receives how long each save stalled the training loop (the step breakdown).
    - ``shutdown``: releases the process group before a stop signal's exit.
    - ``on_abandoned``: the lifecycle's decision on a save the writer abandoned (a writer died,
      a stop signal with no reports); None: :class:`SaveAbandoned` reaches the caller.
    - ``on_resumed``: receives the step a restore resumed at (from disk or a live replica
      group), not called on a fresh start (the metrics recorder).
    - ``memory``: where the memory tier keeps its snapshots on this node (``memory_every_steps``).
    - ``failing``: whether this process is ending with an error (the memory tier keeps its
      snapshots for the rerun then; it removes them after a good end).
    - ``uncounted``: a context in which optimizer steps are not the training's (the restore
      steps each optimizer once to create its state; the step counter must not count that).
    """

    process: ProcessInfo = field(default_factory=ProcessInfo)
    is_main: bool | None = None
    scaler: torch.amp.GradScaler | None = None
    store: Callable[[], dist.Store] | None = None
    job_dir: str | None = None
    slurm_job_id: str | None = None
    stuck: Callable[[], bool] | None = None
    on_close: Callable[[Callable[[], None]], None] = _ignore
    on_stall: Callable[[float], None] | None = None
    shutdown: Callable[[], None] | None = None
    on_abandoned: Callable[[SaveAbandoned], NoReturn] | None = None
    on_resumed: Callable[[int], None] | None = None
    uncounted: Callable[[], AbstractContextManager[None]] = contextlib.nullcontext
    memory: NodePlace = field(default_factory=NodePlace)
    failing: Callable[[], bool] = _never

    def resumed(self, resumed: Resumed) -> Resumed:
        """Tell ``on_resumed`` where a restore ended, and hand `resumed` back."""
        if self.on_resumed is not None and resumed.step:
            self.on_resumed(resumed.step)
        return resumed

    @property
    def main(self) -> bool:
        """Whether this process prints the checkpointer's lines."""
        return self.process.rank == 0 if self.is_main is None else self.is_main

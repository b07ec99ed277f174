"""`distrain run --replicas` as the Context's training layer (worker/layer.py).

It decorates the script's strategy (DDP or FSDP inside the group, TorchFT across the groups:
models.py), makes checkpointers that heal from a live group (checkpoint/healed.py), splits the
data over groups × ranks, lets only group 0's rank 0 print, takes the job's committed step as the
training's, and votes each optimizer step through the quorum.  The commit itself stays where the
optimizer steps (optimizers.py hooks every ``opt.step()``; ``ctx.step`` reaches the same vote).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from distrain.parallel.options import Decorated
from distrain.worker.layer import Layer

if TYPE_CHECKING:
    from distrain.checkpoint import Checkpointer, JobHandles, NoDisk
    from distrain.parallel.options import Strategy
    from distrain.process.info import ProcessInfo
    from distrain.settings import Settings
    from distrain.worker.replicas.training import Replicas


def make_layer(process: ProcessInfo, settings: Settings, precision: str) -> ReplicaLayer | None:
    """The layer of a process `distrain run --replicas` started (None: not in a group's job)."""
    from distrain.worker.replicas.training import attach

    replicas = attach(process, settings, precision)
    return ReplicaLayer(replicas) if replicas is not None else None


class ReplicaLayer(Layer):
    """The training layer of one process of a replica group (`replicas`: its TorchFT side)."""

    def __init__(self, replicas: Replicas) -> None:
        self.replicas = replicas

    def committed_step(self) -> int | None:
        """The job's committed step (healed too), once this process joined the quorum."""
        replicas = self.replicas
        return replicas.manager.current_step() if replicas.started else None

    def is_main(self, rank: int) -> bool:
        """Rank 0 of group 0 prints (every group has a rank 0)."""
        return rank == 0 and self.replicas.group == 0

    def decorate(self, spec: Strategy) -> Decorated:
        """The script's strategy inside the group, TorchFT's average across the groups."""
        return Decorated(spec, self.replicas.prepare_model)

    def data_rank(self, rank: int, world: int) -> tuple[int, int]:
        """(shard, shards) over groups × ranks (the batch must not come from one group's size)."""
        return self.replicas.data_rank()

    def step(self, apply: Callable[[], None]) -> bool:
        """Apply the step only if the quorum commits it; whether it did."""
        return bool(self.replicas.step(apply))

    def checkpointer(
        self, directory: str | os.PathLike[str] | None, handles: JobHandles, **options: Any
    ) -> Checkpointer | NoDisk:
        """A checkpointer in the group's own folder that heals from a live group."""
        from distrain.checkpoint.healed import HealedCheckpointer, HealedNoDisk

        if directory is None:
            return HealedNoDisk(self.replicas, handles, **options)
        return HealedCheckpointer(self.replicas, handles, directory, **options)

    def started(self, shutdown: Callable[[], None]) -> None:
        """The end's quorums run before TorchFT's threads stop, not after (sync.py)."""
        from distrain.worker.replicas.sync import before_threads_stop

        before_threads_stop(shutdown)

    def close(self) -> None:
        """Serve the groups still to come, leave the final digest, stop TorchFT's manager."""
        self.replicas.close()

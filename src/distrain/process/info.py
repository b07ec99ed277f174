"""This process's place in the job, as components receive it: :class:`ProcessInfo`.

The Context (worker/context.py) is the script's facade; components (the checkpointer, the
preemption handling, replica groups) take this small frozen description instead, plus the
handles and callables they need, given explicitly.  They can then be built and tested without a
Context, and the layers point one way: worker/ builds checkpoint/'s components, never the
reverse.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from distrain.process.reductions import Reductions


@dataclass(frozen=True)
class ProcessInfo(Reductions):
    """Rank, world size, local rank, node, device and backend of one process (frozen).

    The defaults describe one plain process: no process group (``backend`` None), so the
    collectives it inherits (``all_reduce``, ``broadcast_object``, ``gather_object``,
    ``barrier``) return the local value.  With a backend they run over the default group.
    """

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    local_world_size: int = 1
    node_rank: int = 0
    num_nodes: int = 1
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    #: the process group's backend (``gloo``, ``nccl``), None when there is no process group
    backend: str | None = None

"""`distrain.spawn`: torch.multiprocessing.spawn with the env contract set for you."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from distrain.contract import SPAWN as SPAWN_MARKER
from distrain.net import free_port


def _worker(
    local_rank: int, fn: Callable[..., Any], nprocs: int, port: int, args: tuple[Any, ...]
) -> None:
    os.environ.update(
        {
            SPAWN_MARKER: "1",
            "RANK": str(local_rank),
            "LOCAL_RANK": str(local_rank),
            "WORLD_SIZE": str(nprocs),
            "LOCAL_WORLD_SIZE": str(nprocs),
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
        }
    )
    fn(local_rank, *args)


def spawn(
    fn: Callable[..., Any], nprocs: int, args: tuple[Any, ...] = (), join: bool = True
) -> Any:
    """Run ``fn(rank, *args)`` in `nprocs` fresh processes on this machine.

    Unlike a bare ``torch.multiprocessing.spawn``, each process already knows its rank, the
    world size and a free MASTER_PORT (no hard-coded 12355), so ``distrain.init()`` inside
    `fn` just works.  Returns what torch.multiprocessing.spawn returns.
    """
    import torch.multiprocessing as mp

    if nprocs < 1:
        raise ValueError(f"nprocs must be >= 1, got {nprocs}")
    port = free_port()
    return mp.spawn(_worker, args=(fn, nprocs, port, tuple(args)), nprocs=nprocs, join=join)

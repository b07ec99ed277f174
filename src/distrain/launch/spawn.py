"""`distrain.spawn`: torch.multiprocessing.spawn with the env contract set for you."""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from typing import Any

from distrain.contract import SPAWN as SPAWN_MARKER
from distrain.net import reserve_port

#: ports held for the processes of a ``spawn(..., join=False)`` (until this process exits)
_HELD: list[socket.socket] = []


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
    held = reserve_port("127.0.0.1")  # the port stays ours until rank 0's store binds it
    port = int(held.getsockname()[1])
    try:
        context = mp.spawn(_worker, args=(fn, nprocs, port, tuple(args)), nprocs=nprocs, join=join)
    finally:
        if join:
            held.close()
    if not join:
        _HELD.append(held)  # the processes run on: rank 0 may not have bound it yet
    return context

"""The c10d store a worker's process group forms on: restart-safe, and listening only where asked."""

from __future__ import annotations

import datetime as dt
import os
import socket

import torch.distributed as dist

from ..cluster import ClusterEnvironment
from ..contract import BIND_ADDR

#: listening sockets handed to TCPStore; kept alive for the life of the process
_STORE_SOCKETS: list[socket.socket] = []


def store_listen_fd(master_addr: str, port: int) -> int | None:
    """A socket listening on the address `distrain run` chose (DISTRAIN_BIND_ADDR) for rank 0's store.

    torch's TCPStore server listens on every interface; given ``master_listen_fd`` it uses our
    socket instead, bound to the one address the other nodes use.  None (torch's default) when
    distrain run chose nothing or MASTER_ADDR is not that address.
    """
    bind = os.environ.get(BIND_ADDR, "")
    if not bind:
        return None
    try:
        if socket.gethostbyname(master_addr) != bind:
            return None
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((bind, port))
        sock.listen(2048)
    except OSError:
        return None
    _STORE_SOCKETS.append(sock)
    return sock.fileno()


def restart_safe_store(env: ClusterEnvironment, timeout: dt.timedelta) -> dist.Store:
    """A TCPStore client/server under a per-restart-attempt prefix.

    After torchrun restarts a worker group, keys written by the previous attempt (and a
    half-torn-down store shared with the agent) make gloo's connectFullMesh fail or hang
    (pytorch#135712).  A prefix per TORCHELASTIC_RESTART_COUNT gives each attempt a clean
    namespace.
    """
    is_master = env.rank() == 0 and not env.store_is_external()
    # multi-node `distrain run`: listen only on the chosen interface, not on every one
    listen_fd = store_listen_fd(env.master_addr(), env.master_port()) if is_master else None
    store = dist.TCPStore(
        env.master_addr(),
        env.master_port(),
        world_size=None if not is_master else env.world_size(),
        is_master=is_master,
        timeout=timeout,
        wait_for_workers=False,
        **({"master_listen_fd": listen_fd} if listen_fd is not None else {}),
    )
    return dist.PrefixStore(f"distrain/attempt_{env.restart_count()}", store)

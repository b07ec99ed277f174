"""Rank 0's store port, held by the agent that chooses it until rank 0 listens there.

``distrain run`` gives every worker group its own store (``TORCH_DISABLE_SHARE_RDZV_TCP_STORE``,
launch/plan.py), so torch's rendezvous picks the port with ``get_free_port()``: bind port 0,
read the number, close.  Between that close and rank 0's bind seconds later, a loopback
connection anywhere on the machine may take the port as its source port; rank 0 then fails with
``EADDRINUSE`` (pytorch#126510; a gloo mesh opens dozens of such connections).  Here the agent's
``get_free_port`` returns a port it keeps held (net.reserve_port) for the rest of that round:
the kernel hands it to nobody else, and rank 0's store, which binds with ``SO_REUSEADDR``, gets
it.  The choice stays torch's own rendezvous; only where the number comes from changes.
"""

from __future__ import annotations

import socket

from distrain.net import reserve_port
from distrain.process import patching

FEATURE = "store_port"

#: the port held for the current round (the agent of rendezvous rank 0 only)
_held: list[socket.socket] = []


def held_free_port() -> int:
    """torch's ``get_free_port`` for the agent: a port held until the next round asks again."""
    release()  # a new round: the previous round's rank 0 is gone, its port with it
    sock = reserve_port()
    _held.append(sock)
    return int(sock.getsockname()[1])


def release() -> None:
    """Let the held port go (a new round, or the job's end)."""
    while _held:
        _held.pop().close()


def install() -> None:
    """Make torch's rendezvous take rank 0's store port from :func:`held_free_port`."""
    from torch.distributed.elastic.rendezvous import api

    patching.replace(api, "get_free_port", held_free_port, feature=FEATURE)

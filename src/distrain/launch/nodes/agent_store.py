"""The elastic agent's store on one node: listening on loopback (or the named address) only.

torch's elastic agent hosts a TCPStore for its rendezvous (c10d) or for the workers (static
``--master-port``), and TCPStore listens on every interface: torch offers no bind address.  It
does accept a listening socket (``master_listen_fd``), and a ``multi_tenant`` store reuses the
server already running in the process on the same port.  So for a one-node job the launcher
starts that server itself on a socket bound to loopback, before the agent starts, and torch's
own rendezvous creates its store on the same port and gets ours.  Nothing of the rendezvous is
re-implemented; a port that cannot be bound where asked is an error, never all interfaces.
"""

from __future__ import annotations

import datetime as dt
import socket
import uuid
from dataclasses import dataclass, replace
from typing import Any

from distrain.errors import UsageError
from distrain.launch.nodes.rendezvous import Rendezvous
from distrain.net import is_loopback, listen_socket

LOOPBACK = "127.0.0.1"


class AgentStore:
    """A TCPStore server on one address, alive while the job runs (torch's agent reuses it)."""

    def __init__(self, host: str, port: int) -> None:
        import torch.distributed as dist

        try:
            self.socket = listen_socket(host, port)
        except OSError as err:
            where = f"{host}:{port}" if port else host
            raise UsageError(
                f"cannot listen on {where} for the job's store: {err.strerror or err}"
            ) from None
        self.host, self.port = host, int(self.socket.getsockname()[1])
        self.address = str(self.socket.getsockname()[0])
        self.store: Any = dist.TCPStore(
            host,
            self.port,
            is_master=True,
            multi_tenant=True,  # torch's rendezvous asks for a multi-tenant store: it gets this one
            master_listen_fd=self.socket.fileno(),
            wait_for_workers=False,
            timeout=dt.timedelta(seconds=60),
        )
        self.socket.detach()  # the store owns the descriptor now and closes it itself

    def close(self) -> None:
        """Stop listening (the job is over)."""
        self.store = None


def _split_endpoint(endpoint: str) -> tuple[str, int]:
    host, _, port = endpoint.rpartition(":")
    if not host or not port.isdigit():
        return endpoint.strip("[]"), 0
    return host.strip("[]"), int(port)


@dataclass(frozen=True)
class StoreSpec:
    """Where the launcher starts the agent's store: host and port (0: a free one, at start)."""

    host: str
    port: int


def plan_store(r: Rendezvous) -> tuple[Rendezvous, StoreSpec | None]:
    """For a one-node torchrun-style job: the agent's store on loopback, and the rendezvous on it.

    - no ``--master-port`` (or ``--standalone``): a c10d rendezvous on 127.0.0.1 and a free port
      (the endpoint says port 0 until the store listens: Rendezvous.on_port);
    - ``--master-port P`` (static rendezvous): the store on ``--master-addr``:P;
    - ``--rdzv-backend c10d --rdzv-endpoint HOST:P`` with a loopback HOST: the store there.
    The workers are told MASTER_ADDR=127.0.0.1 (``--local-addr``), so rank 0's own store, bound
    by the worker (worker/start/store.py), listens on loopback too.  No store for multi-node jobs
    and other rendezvous backends (their stores are where the user pointed them).
    """
    if r.max_nodes > 1:
        return r, None
    if r.static and r.master_port is not None and not r.standalone:
        return r, StoreSpec(r.master_addr, r.master_port)
    local = r.local_addr or LOOPBACK
    if r.standalone or r.static:
        endpoint, rdzv_id = f"{LOOPBACK}:0", str(uuid.uuid4())
        c10d = replace(r, standalone=False, backend="c10d", endpoint=endpoint, id=rdzv_id)
        return replace(c10d, local_addr=local), StoreSpec(LOOPBACK, 0)
    if r.backend == "c10d" and r.endpoint:
        host, port = _split_endpoint(r.endpoint)
        try:
            loopback = is_loopback(socket.gethostbyname(host))
        except OSError:
            return r, None  # torch reports the unresolvable endpoint itself
        if not loopback:
            return r, None
        return replace(r, endpoint=f"{LOOPBACK}:{port}", local_addr=local), StoreSpec(
            LOOPBACK, port
        )
    return r, None

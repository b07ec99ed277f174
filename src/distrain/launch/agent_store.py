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

import argparse
import datetime as dt
import socket
import uuid
from typing import Any

from ..errors import UsageError
from ..net import is_loopback, listen_socket

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


def host_agent_store(args: argparse.Namespace, max_nodes: int) -> AgentStore | None:
    """For a one-node torchrun-style job, start the agent's store on loopback and point `args` at it.

    - no ``--master-port`` (or ``--standalone``): a c10d rendezvous on 127.0.0.1 and a free port;
    - ``--master-port P`` (static rendezvous): the store on ``--master-addr``:P;
    - ``--rdzv-backend c10d --rdzv-endpoint HOST:P`` with a loopback HOST: the store there.
    The workers are told MASTER_ADDR=127.0.0.1 (``--local-addr``), so rank 0's own store, bound
    by the worker (runtime/store.py), listens on loopback too.  Returns None for multi-node jobs
    and other rendezvous backends (their stores are where the user pointed them).
    """
    if max_nodes > 1:
        return None
    if (
        args.rdzv_backend == "static"
        and not args.rdzv_endpoint
        and args.master_port is not None
        and not args.standalone
    ):
        host = str(args.master_addr)
        return AgentStore(host, int(args.master_port))
    if args.standalone or (args.rdzv_backend == "static" and not args.rdzv_endpoint):
        store = AgentStore(LOOPBACK, 0)
        args.standalone = False
        args.rdzv_backend, args.rdzv_endpoint, args.rdzv_id = (
            "c10d",
            f"{LOOPBACK}:{store.port}",
            str(uuid.uuid4()),
        )
        args.local_addr = args.local_addr or LOOPBACK
        return store
    if args.rdzv_backend == "c10d" and args.rdzv_endpoint:
        host, port = _split_endpoint(str(args.rdzv_endpoint))
        try:
            loopback = is_loopback(socket.gethostbyname(host))
        except OSError:
            return None  # torch reports the unresolvable endpoint itself
        if not loopback:
            return None
        store = AgentStore(LOOPBACK, port)
        args.rdzv_endpoint = f"{LOOPBACK}:{store.port}"
        args.local_addr = args.local_addr or LOOPBACK
        return store
    return None

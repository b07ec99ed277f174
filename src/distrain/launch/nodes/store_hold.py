"""The node hosting a multi-node job's c10d store keeps it until the other nodes are done with it.

Every node's agent closes the rendezvous through the store as it ends (torch's
``RendezvousHandler.shutdown``, after the exit barrier all nodes pass together).  The store's
server lives in the agent of one node and ends with it: when that node finished first, another
node still closing met a closed connection and ended a finished job with the store's
``recvVector failed`` warning, 30 C++ frames and "failed to shutdown the rendezvous" (CI: 2 nodes
on one loaded machine; 3 of 26 successful 2-node runs beside the suite; torchrun does the same).

So the launcher holds a share of the server from the moment its agent hosts it (torch's
multi-tenant stores share one server per port in a process, as launch/nodes/stop_watch.py does for a
static job's store), and once its job succeeded it stays until no other process is connected,
at most :data:`CLOSE_WAIT_S`, then lets the server go.  Nothing new listens.
"""

from __future__ import annotations

import datetime as dt
import threading
import time
from typing import Any

from distrain.launch.nodes.rendezvous import Rendezvous
from distrain.net import listening_here, split_endpoint

#: seconds between two looks for the agent's server, until this process has one
POLL_S = 0.5
#: the agent makes its store as it starts (torch's rendezvous handler): a launcher that found no
#: server of its own in this long is not the host, and stops looking
SEARCH_S = 300.0
#: how long the host stays, once its job succeeded, for the other nodes to close the rendezvous
CLOSE_WAIT_S = 15.0


def other_clients(port: int) -> int:
    """Connections to this process's server on `port` from other processes (its own clients,
    connections to itself, are matched by their port and not counted)."""
    import psutil

    conns = psutil.Process().net_connections("tcp")
    own = {c.laddr.port for c in conns if c.raddr and c.raddr.port == port}
    return sum(
        1
        for c in conns
        if c.laddr
        and c.laddr.port == port
        and c.raddr
        and c.status == psutil.CONN_ESTABLISHED
        and c.raddr.port not in own
    )


class StoreHold:
    """One launcher's hold on the c10d store its agent may host; see the module docstring."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self._done = threading.Event()
        self._share: Any = None
        self._thread = threading.Thread(target=self._run, name="distrain-store-hold", daemon=True)

    def start(self) -> StoreHold:
        """Start looking for the agent's server; returns self."""
        self._thread.start()
        return self

    def _run(self) -> None:
        deadline = time.monotonic() + SEARCH_S
        while not self._done.wait(POLL_S) and time.monotonic() < deadline:
            try:
                if not listening_here(self.port):
                    continue
                import torch.distributed as dist

                self._share = dist.TCPStore(
                    self.host,
                    self.port,
                    is_master=True,
                    multi_tenant=True,
                    wait_for_workers=False,
                    timeout=dt.timedelta(seconds=10),
                )
            except Exception:  # not shared after all: the store ends with the agent, as before
                self._share = None
            return

    def finish(self, succeeded: bool, bound_s: float = CLOSE_WAIT_S) -> None:
        """At the launcher's end: after a success, stay while other nodes are connected (at most
        `bound_s`); then let the server go."""
        self._done.set()
        self._thread.join(timeout=5)
        try:
            if succeeded and self._share is not None:
                deadline = time.monotonic() + bound_s
                while other_clients(self.port) and time.monotonic() < deadline:
                    time.sleep(0.1)
        except Exception:  # best effort: the job is over either way
            pass
        self._share = None


def start(rdzv: Rendezvous) -> StoreHold | None:
    """For a multi-node c10d job: hold the store if this launcher's agent hosts it; else None."""
    if rdzv.backend != "c10d" or not rdzv.endpoint or rdzv.max_nodes < 2:
        return None
    host, port = split_endpoint(rdzv.endpoint)
    return StoreHold(host, port).start()

"""Node 0 knows at once when another node's `distrain run` has ended: its connections closed.

A static rendezvous has no membership signal, so a restarted attempt waited
``DISTRAIN_REJOIN_TIMEOUT`` (60 s) for the ranks of a node whose launcher was gone and could
restart nothing (the chaos campaign's node loss: 60 of its 75–86 s, benchmarks/chaos/RESULTS.md).
Every launcher is a client of the agents' store that node 0's `distrain run` serves
(stop_watch.py); when a launcher's process ends, however it ends, its kernel closes those
connections and node 0's side of them goes at once.  Each other node's launcher names its own
connections in the store (``…/conns/N``: its local ``address:port`` list); node 0's watch, which
holds the server's side, sees when none of them is established any more and leaves
``…/gone/N`` (``coordination/stop_claim.gone_key``), which a restarted rank's rejoin wait reads
(worker/start/store.py) to stop at once instead of at the bound.

A connection, not a heartbeat: a node slowed by load, or frozen, keeps its connections open
whatever its scheduling, so it never counts as gone; only a process that ended (or a
kernel that reset them) closes them.  A machine that loses power sends nothing: its node still
counts at the bound.  Only a connection node 0 has seen established, under the same
registration, counts as closed (an address translated on the way is never seen, so never gone).
"""

from __future__ import annotations

import socket
from typing import Any

from distrain.coordination.stop_claim import JOB_STOPPED_KEY, gone_key

#: what node 0 says of a node whose launcher's connections closed (a rank's last line quotes it)
GONE = "its launcher ended (its connections to node 0's store closed)"


def conns_key(node: int) -> str:
    """Where node `node`'s launcher names its connections to the agents' store."""
    return f"{JOB_STOPPED_KEY}/conns/{node}"


def _plain(ip: str) -> str:
    """An IPv4-mapped IPv6 address as IPv4 (a dual-stack server sees its IPv4 clients so)."""
    return ip.removeprefix("::ffff:")


def _addresses(host: str) -> set[str]:
    try:
        return {_plain(str(info[4][0])) for info in socket.getaddrinfo(host, None)}
    except OSError:
        return set()


def own_connections(host: str, port: int) -> str:
    """This process's established connections to `host`:`port`, as ``ip:port`` words, sorted."""
    import psutil

    addresses = _addresses(host)
    return " ".join(
        sorted(
            f"{_plain(c.laddr.ip)}:{c.laddr.port}"
            for c in psutil.Process().net_connections("tcp")
            if c.status == psutil.CONN_ESTABLISHED
            and c.raddr
            and c.raddr.port == port
            and (not addresses or _plain(c.raddr.ip) in addresses)
        )
    )


def served_peers(port: int) -> set[str]:
    """The ``ip:port`` of every client this process's server on `port` holds established."""
    import psutil

    return {
        f"{_plain(c.raddr.ip)}:{c.raddr.port}"
        for c in psutil.Process().net_connections("tcp")
        if c.status == psutil.CONN_ESTABLISHED and c.raddr and c.laddr and c.laddr.port == port
    }


class GoneLook:
    """Node 0's look, once a second from its stop watch, for launchers whose connections closed."""

    def __init__(self, port: int, nodes: int) -> None:
        self.port, self.nodes = port, nodes
        #: node -> the registration seen established (only its closing counts)
        self._seen: dict[int, str] = {}
        #: nodes marked gone, by the registration that closed
        self.gone: dict[int, str] = {}

    def look(self, store: Any) -> None:
        """Mark each node whose launcher's seen connections are all closed; unmark a rerun one."""
        served: set[str] | None = None
        for node in range(1, self.nodes):
            if not store.check([conns_key(node)]):
                continue
            named = bytes(store.get(conns_key(node))).decode()
            if self.gone.get(node, named) != named:  # the node's launcher was run again
                del self.gone[node]
                store.delete_key(gone_key(node))
            if node in self.gone or not named:
                continue
            if served is None:
                served = served_peers(self.port)
            if served & set(named.split()):
                self._seen[node] = named
            elif self._seen.get(node) == named:
                self.gone[node] = named
                store.set(gone_key(node), GONE)

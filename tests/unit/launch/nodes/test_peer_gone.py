"""Node 0 marks a node gone when its launcher's connections to the agents' store close, and a
restarted rank's rejoin wait ends on that mark (launch/nodes/peer_gone.py, worker/start/store.py).

Real TCPStores on loopback in this process: a client closed is a launcher that ended.
"""

from __future__ import annotations

import datetime as dt
import gc
import time

import pytest
import torch.distributed as dist
from helpers import held_port

from distrain.coordination.stop_claim import gone_key
from distrain.errors import DistrainError
from distrain.launch.nodes.peer_gone import GONE, GoneLook, conns_key, own_connections
from distrain.worker.start.store import GoneNodes, await_peers

TIMEOUT = dt.timedelta(seconds=10)


def _server(port: int) -> dist.TCPStore:
    return dist.TCPStore("127.0.0.1", port, is_master=True, multi_tenant=True,
                         timeout=TIMEOUT, wait_for_workers=False)  # fmt: skip


def _launcher(port: int) -> tuple[dist.TCPStore, str]:
    """A client of the store and its connections as its launcher would name them."""
    before = set(own_connections("127.0.0.1", port).split())
    client = dist.TCPStore("127.0.0.1", port, is_master=False, timeout=TIMEOUT,
                           wait_for_workers=False)  # fmt: skip
    client.set("x", "1")  # connected for sure
    named = set(own_connections("127.0.0.1", port).split()) - before
    return client, " ".join(sorted(named))


def _look_until(look: GoneLook, server: dist.TCPStore, gone: bool) -> None:
    deadline = time.monotonic() + 5
    while (1 in look.gone) != gone and time.monotonic() < deadline:
        look.look(server)
        time.sleep(0.05)


def test_a_node_whose_launcher_closed_its_connections_is_gone_until_it_is_run_again() -> None:
    port = held_port()
    server = _server(port)
    client, named = _launcher(port)
    assert named, "the client's connection was not found"
    server.set(conns_key(1), named)
    look = GoneLook(port, 2)
    look.look(server)  # seen established: alive, however long it stays quiet
    time.sleep(0.3)
    look.look(server)
    assert 1 not in look.gone and not server.check([gone_key(1)])

    del client  # the launcher's process ended: its kernel closed the connection
    gc.collect()
    _look_until(look, server, gone=True)
    assert bytes(server.get(gone_key(1))).decode() == GONE

    again, named = _launcher(port)  # the node's command run again: a new registration
    server.set(conns_key(1), named)
    _look_until(look, server, gone=False)
    assert 1 not in look.gone and not server.check([gone_key(1)])
    del again


def test_connections_never_seen_established_never_make_a_node_gone() -> None:
    port = held_port()
    server = _server(port)
    server.set(conns_key(1), "10.9.9.9:40000")  # an address translated on the way
    look = GoneLook(port, 2)
    for _ in range(3):
        look.look(server)
    assert not look.gone and not server.check([gone_key(1)])


def test_the_rejoin_wait_ends_at_once_on_a_gone_node_and_at_its_bound_otherwise() -> None:
    agents, ranks = held_port(), held_port()
    agents_store, rank_store = _server(agents), _server(ranks)
    gone = GoneNodes(f"127.0.0.1:{agents}", 1)
    started = time.monotonic()
    with pytest.raises(DistrainError, match="within 1.5 s"):
        await_peers(rank_store, 0, 2, 1.5, gone)  # rank 1 never checks in, node 1 not gone
    assert time.monotonic() - started >= 1.5

    agents_store.set(gone_key(1), GONE)
    started = time.monotonic()
    said = await_peers(dist.PrefixStore("again", rank_store), 0, 2, 60.0, gone)
    assert said == ([1], GONE)
    assert time.monotonic() - started < 5.0
    rank_store.set("again/distrain/rejoined/1", "1")  # every rank in: no stop, gone or not
    assert await_peers(dist.PrefixStore("again", rank_store), 0, 2, 60.0, gone) is None

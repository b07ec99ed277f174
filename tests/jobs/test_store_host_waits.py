"""The launcher hosting a multi-node job's c10d store keeps it, once the job succeeded, until the
other nodes' agents are done with it (launch/nodes/store_hold.py), on a real TCPStore with a real
client process."""

from __future__ import annotations

import datetime as dt
import gc
import subprocess
import sys
import time

import torch.distributed as dist
from helpers import held_port, kill_group

from distrain.launch.nodes import store_hold
from distrain.launch.nodes.rendezvous import Rendezvous
from distrain.launch.nodes.store_hold import StoreHold, other_clients
from distrain.net import listening_here

#: a client that connects, says so, and stays for argv[2] seconds
CLIENT = (
    "import datetime, sys, time, torch.distributed as dist\n"
    "s = dist.TCPStore('127.0.0.1', int(sys.argv[1]), is_master=False,"
    " timeout=datetime.timedelta(seconds=30), wait_for_workers=False)\n"
    "s.set('connected', '1'); print('connected', flush=True); time.sleep(float(sys.argv[2]))\n"
)


def _agent_store(port: int) -> dist.TCPStore:
    """The server as torch's c10d rendezvous backend makes it in the agent (multi-tenant)."""
    return dist.TCPStore("127.0.0.1", port, is_master=True, multi_tenant=True,
                         timeout=dt.timedelta(seconds=10), wait_for_workers=False)  # fmt: skip


def _held(port: int) -> StoreHold:
    hold = StoreHold("127.0.0.1", port).start()
    deadline = time.monotonic() + 30
    while hold._share is None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert hold._share is not None, "the hold never shared the agent's server"
    return hold


def _client(port: int, stay_s: float) -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, "-c", CLIENT, str(port), str(stay_s)],
                            stdout=subprocess.PIPE, text=True, start_new_session=True)  # fmt: skip
    assert proc.stdout is not None and proc.stdout.readline().strip() == "connected"
    return proc


def test_the_server_outlives_the_agents_store_until_the_other_node_left() -> None:
    port = held_port()
    agent = _agent_store(port)
    hold = _held(port)
    proc = _client(port, 3.0)
    try:
        del agent  # the agent's rendezvous handler is gone once its job ended
        gc.collect()
        assert listening_here(port), "the server ended with the agent's store"
        assert other_clients(port) == 1  # the other process, not this one's own share
        started = time.monotonic()
        hold.finish(succeeded=True, bound_s=60)
        took = time.monotonic() - started
        # the client's connection closes when its 3 s are over (its process ends later)
        assert 1.5 <= took < 30, took
        gc.collect()
        assert not listening_here(port), "the server outlived the hold"
    finally:
        kill_group(proc)


def test_the_wait_is_bounded_and_only_after_a_success() -> None:
    port = held_port()
    agent = _agent_store(port)
    proc = _client(port, 120.0)  # a node that never leaves
    try:
        hold = _held(port)
        started = time.monotonic()
        hold.finish(succeeded=True, bound_s=1.5)
        assert 1.5 <= time.monotonic() - started < 10
        hold = _held(port)
        started = time.monotonic()
        hold.finish(succeeded=False, bound_s=30)  # a failed job: the store goes as before
        assert time.monotonic() - started < 5
    finally:
        kill_group(proc)
        del agent


def test_no_hold_off_the_host_or_on_one_node() -> None:
    def rdzv(endpoint: str, nodes: str) -> Rendezvous:
        return Rendezvous("c10d", endpoint, "job", "", nodes, 0, "127.0.0.1", 29500, None)

    assert store_hold.start(rdzv("127.0.0.1:29400", "1")) is None
    assert store_hold.start(Rendezvous("static", "", "none", "", "2", 0, "x", 29500, None)) is None
    hold = store_hold.start(rdzv(f"127.0.0.1:{held_port()}", "1:2"))  # no server here
    assert hold is not None
    time.sleep(1.2)
    started = time.monotonic()
    hold.finish(succeeded=True, bound_s=30)
    assert hold._share is None and time.monotonic() - started < 5

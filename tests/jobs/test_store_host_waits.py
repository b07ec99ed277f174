"""The launcher hosting a multi-node job's c10d store stays until the other nodes' agents have
closed the rendezvous through it (launch/rendezvous.py ``wait_for_other_nodes``), on a real
TCPStore with a real client process."""

from __future__ import annotations

import datetime as dt
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
import torch.distributed as dist
from helpers import kill_group

from distrain.launch.rendezvous import Rendezvous, other_clients, wait_for_other_nodes
from distrain.net import free_port

#: a client that connects, says so, and stays for argv[2] seconds
CLIENT = (
    "import datetime, sys, time, torch.distributed as dist\n"
    "s = dist.TCPStore('127.0.0.1', int(sys.argv[1]), is_master=False,"
    " timeout=datetime.timedelta(seconds=30), wait_for_workers=False)\n"
    "s.set('connected', '1'); print('connected', flush=True); time.sleep(float(sys.argv[2]))\n"
)


@pytest.fixture
def server() -> Iterator[tuple[int, dist.TCPStore]]:
    port = free_port()
    store = dist.TCPStore("127.0.0.1", port, is_master=True, multi_tenant=True,
                          timeout=dt.timedelta(seconds=10), wait_for_workers=False)  # fmt: skip
    yield port, store


def _rdzv(port: int, nodes: str = "2") -> Rendezvous:
    return Rendezvous("c10d", f"127.0.0.1:{port}", "job", "", nodes, 0, "127.0.0.1", 29500, None)


def _client(port: int, stay_s: float) -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, "-c", CLIENT, str(port), str(stay_s)],
                            stdout=subprocess.PIPE, text=True, start_new_session=True)  # fmt: skip
    assert proc.stdout is not None and proc.stdout.readline().strip() == "connected"
    return proc


def test_the_host_stays_until_the_other_node_has_gone(server: tuple[int, dist.TCPStore]) -> None:
    port, store = server
    own = dist.TCPStore("127.0.0.1", port, is_master=False, wait_for_workers=False)
    own.set("own", "1")  # this process's own client (the launcher's watch, its agent)
    proc = _client(port, 3.0)
    try:
        assert other_clients(port) == 1  # the other process; this process's own client not
        started = time.monotonic()
        wait_for_other_nodes(_rdzv(port), bound_s=60)
        took = time.monotonic() - started
        # the client's connection closes when its 3 s are over (its process ends later)
        assert 2.5 <= took < 30, took
        assert other_clients(port) == 0
    finally:
        kill_group(proc)


def test_the_wait_is_bounded(server: tuple[int, dist.TCPStore]) -> None:
    port, _store = server
    proc = _client(port, 120.0)  # a node that never leaves
    try:
        started = time.monotonic()
        wait_for_other_nodes(_rdzv(port), bound_s=1.5)
        took = time.monotonic() - started
        assert 1.5 <= took < 10, took
        assert proc.poll() is None
    finally:
        kill_group(proc)


def test_no_wait_off_the_host_or_on_one_node(server: tuple[int, dist.TCPStore]) -> None:
    port, _store = server
    proc = _client(port, 120.0)
    try:
        for rdzv in (_rdzv(port, "1"), _rdzv(free_port())):  # one node; a store not hosted here
            started = time.monotonic()
            wait_for_other_nodes(rdzv, bound_s=30)
            assert time.monotonic() - started < 5
    finally:
        kill_group(proc)

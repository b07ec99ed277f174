"""Node 0's launcher stays until the other nodes read why the job stopped, within its bound
(launch/nodes/stop_watch.py), on a real TCPStore on loopback."""

from __future__ import annotations

import datetime as dt
import signal
import threading
import time
from pathlib import Path

import pytest
import torch.distributed as dist
from helpers import held_port

from distrain.coordination.stop_claim import JOB_STOPPED_KEY, claim_stop
from distrain.launch.nodes import stop_watch
from distrain.launch.nodes.stop_watch import GONE_S, READ_WAIT_S, StopWatch


def _node0_watch(tmp_path: Path) -> tuple[StopWatch, dist.TCPStore]:
    port = held_port()
    server = dist.TCPStore("127.0.0.1", port, is_master=True, multi_tenant=True,
                           timeout=dt.timedelta(seconds=10), wait_for_workers=False)  # fmt: skip
    server.set(JOB_STOPPED_KEY, "rank 1 froze")
    claim_stop(str(tmp_path))  # a rank of node 0 stopped it: no SIGTERM here
    watch = StopWatch("127.0.0.1", port, 0, 2, str(tmp_path)).start()
    deadline = time.monotonic() + 30
    while watch._store is None and time.monotonic() < deadline:  # its first look
        time.sleep(0.1)
    assert watch._store is not None, "the watch never reached the store"
    return watch, server


def test_node0_waits_for_the_other_node_to_read_then_ends(tmp_path: Path) -> None:
    watch, server = _node0_watch(tmp_path)
    server.add(f"{JOB_STOPPED_KEY}/alive/1", 1)
    server.set(f"{JOB_STOPPED_KEY}/read/1", "1")
    started = time.monotonic()
    watch.finish()
    assert time.monotonic() - started < 2.0


def test_node0_stops_waiting_for_a_node_that_stopped_looking(tmp_path: Path) -> None:
    watch, _server = _node0_watch(tmp_path)  # node 1 never looks (its launcher is gone)
    started = time.monotonic()
    watch.finish()
    took = time.monotonic() - started
    assert GONE_S <= took < READ_WAIT_S, took


def test_one_node_and_c10d_jobs_are_not_watched() -> None:
    from distrain.launch.nodes.rendezvous import Rendezvous

    one = Rendezvous("static", "", "none", "", "1", 0, "127.0.0.1", 29500, None)
    assert stop_watch.start(one, None) is None
    c10d = Rendezvous("c10d", "127.0.0.1:29500", "job", "", "2", 0, "127.0.0.1", 29500, None)
    assert stop_watch.start(c10d, None) is None


def _watch_stopping_itself(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stand_down_first: bool
) -> tuple[StopWatch, list[int]]:
    """A node's watch reads a rank's reason in the store after its launcher's end removed the
    job's folder (so the stop claim is free again): the look is held until the test says go."""
    port = held_port()
    server = dist.TCPStore("127.0.0.1", port, is_master=True, multi_tenant=True,
                           timeout=dt.timedelta(seconds=10), wait_for_workers=False)  # fmt: skip
    server.set(JOB_STOPPED_KEY, "rank 0 froze")
    looking, go = threading.Event(), threading.Event()

    def held_look(host: str, port: int, *args: object) -> bool:
        looking.set()
        go.wait(10)
        return True

    monkeypatch.setattr(stop_watch, "reachable", held_look)
    got: list[int] = []
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: got.append(signum))
    try:
        watch = StopWatch("127.0.0.1", port, 1, 2, str(tmp_path / "removed")).start()
        assert looking.wait(10), "the watch never looked"
        if stand_down_first:  # the agent ended while the watch was in its look
            watch.stand_down()
        go.set()
        watch._thread.join(10)
        assert not watch._thread.is_alive()
        time.sleep(0.2)  # a signal sent reaches this (main) thread's handler
    finally:
        signal.signal(signal.SIGTERM, previous)
        server = None
    return watch, got


def test_a_watch_that_reads_the_reason_signals_its_launcher(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(stop_watch, "KILL_AFTER_S", 0.0)
    watch, got = _watch_stopping_itself(tmp_path, monkeypatch, stand_down_first=False)
    assert got == [signal.SIGTERM] and watch.reason == "rank 0 froze"


def test_a_stood_down_watch_never_signals_a_launcher_printing_its_last_lines(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """CI: the second SIGTERM, from this watch after the end's rmtree, raised in the rmtree."""
    watch, got = _watch_stopping_itself(tmp_path, monkeypatch, stand_down_first=True)
    assert got == [] and watch.reason is None

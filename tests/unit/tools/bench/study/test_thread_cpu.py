"""The workload's per-thread CPU account (what a rank spent beside its training loop)."""

from __future__ import annotations

import threading
import time

from distrain.tools.bench.study.workload import thread_cpu


def test_a_busy_python_thread_is_counted_under_its_name() -> None:
    """A live thread that used 0.3 s of CPU shows under its threading name with about that
    much (the kernel counts in 10 ms ticks); one that only waited, with next to none."""
    spun, stop = threading.Event(), threading.Event()

    def spin() -> None:
        while time.thread_time() < 0.3:  # CPU time, whatever the load
            pass
        spun.set()
        stop.wait()

    busy = threading.Thread(target=spin, name="bench-spin")
    idle = threading.Thread(target=stop.wait, name="bench-idle")
    busy.start()
    idle.start()
    try:
        assert spun.wait(timeout=30)
        got = thread_cpu()
    finally:
        stop.set()
        busy.join(timeout=5)
        idle.join(timeout=5)
    assert "MainThread" in got, got
    assert 0.25 <= got["bench-spin"] < 1.0, got
    assert got["bench-idle"] < 0.05, got

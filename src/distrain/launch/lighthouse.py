"""TorchFT's lighthouse for `distrain run --replicas`: started before the groups, stopped after.

The lighthouse (``torchft_lighthouse``, a Rust program shipped in the ``torchft`` wheel) forms
the quorum of live replica groups at every step.  On one node it listens on loopback only;
across nodes node 0 runs it on the master address and the others reach it there
(:class:`RemoteLighthouse`).  Its
timeouts are short so that a dead group is noticed in well under a second: a group that has not
heartbeated (every 100 ms) for ``heartbeat_timeout_ms`` is dead, and a quorum waits at most
``join_timeout_ms`` for a group that still heartbeats but has not asked to join.

Why 700 ms and 1000 ms: the survivors' pause at a SIGKILL is the heartbeat timeout plus one
quorum change.  On one node a replacement's manager heartbeats within ~0.6 s of the kill (its
first committed step came 0.67–0.73 s after it with a 600 ms timeout), so when the dead group
is dropped the replacement is usually known and the survivors' quorum waits (join timeout) for
it: one reconfiguration and heal instead of two.  Measured on 2 cores (benchmarks/recovery/
RESULTS.md): heartbeat 1000 ms → pause 1.08–1.10 s, 700 → 0.75–0.84 s, 600 → 0.67–0.73 s
(less margin for a slow replacement), 500 with a 500 ms join timeout → 1.2–1.5 s (the quorum
changed twice).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

from ..errors import UsageError
from ..net import free_port

#: how the lighthouse is tuned for one machine (milliseconds)
QUORUM_TICK_MS = 50
JOIN_TIMEOUT_MS = 1000
HEARTBEAT_TIMEOUT_MS = 700  # see the module docstring
#: how long the lighthouse may take to listen
START_TIMEOUT_S = 10.0

EXTRA_HINT = "pip install 'distrain[ft]'"


def answers(host: str, port: int, timeout_s: float) -> bool:
    """True when something accepts a TCP connection on `host`:`port` within `timeout_s`."""
    with socket.socket() as s:
        s.settimeout(timeout_s)
        return s.connect_ex((host, port)) == 0


def lighthouse_program() -> str:
    """Path of ``torchft_lighthouse`` beside this Python, else on PATH; UsageError when torchft is absent."""
    if importlib.util.find_spec("torchft") is None:
        raise UsageError(f"--replicas needs TorchFT, which is not installed ({EXTRA_HINT})")
    beside = os.path.join(os.path.dirname(sys.executable), "torchft_lighthouse")
    found = beside if os.access(beside, os.X_OK) else shutil.which("torchft_lighthouse")
    if not found:
        raise UsageError(
            f"--replicas: torchft is installed but its torchft_lighthouse program is not found ({EXTRA_HINT})"
        )
    return found


class Lighthouse:
    """A running ``torchft_lighthouse`` on ``host``:``port``; :meth:`stop` ends it."""

    def __init__(self, program: str, host: str = "127.0.0.1", port: int | None = None) -> None:
        self.host = host
        last = ""
        for _ in range(3 if port is None else 1):  # a free port may be taken before the lighthouse binds it
            self.port = free_port(host) if port is None else port
            self.log = tempfile.TemporaryFile()  # its log; read only to say why it did not start
            self.proc = subprocess.Popen(
                [program, "--min_replicas", "1", "--quorum_tick_ms", str(QUORUM_TICK_MS),
                 "--join_timeout_ms", str(JOIN_TIMEOUT_MS), "--heartbeat_timeout_ms", str(HEARTBEAT_TIMEOUT_MS),
                 "--bind", f"{host}:{self.port}"],
                stdin=subprocess.DEVNULL, stdout=self.log, stderr=self.log,
            )  # fmt: skip
            last = self._wait_listening()
            if not last:
                return
        raise UsageError(f"the TorchFT lighthouse did not start: {last}")

    def _wait_listening(self) -> str:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self.log.seek(0)
                err = self.log.read().decode(errors="replace")
                lines = [ln for ln in err.strip().splitlines() if ln.strip()]
                return lines[-1] if lines else f"exit code {self.proc.returncode}"
            if answers(self.host, self.port, 0.2):
                return ""
            time.sleep(0.05)
        self.stop()
        return f"not listening on {self.host}:{self.port} after {START_TIMEOUT_S:.0f} s"

    @property
    def address(self) -> str:
        """What torchft.Manager takes as TORCHFT_LIGHTHOUSE."""
        return f"http://{self.host}:{self.port}"

    def who(self) -> str:
        """The lighthouse in a message: its pid."""
        return f"(pid {self.proc.pid})"

    def died(self) -> str | None:
        """How the lighthouse ended ("SIGKILL", "exit code 1"), or None while it runs."""
        code = self.proc.poll()
        if code is None:
            return None
        if code < 0:
            try:
                return signal.Signals(-code).name
            except ValueError:
                return f"signal {-code}"
        return f"exit code {code}"

    def stop(self) -> None:
        """End the lighthouse (the job is over)."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


class RemoteLighthouse:
    """Node 0's lighthouse seen from another node: waited for at the start, then watched."""

    #: unreachable this long (while this node's groups run) counts as ended
    GONE_AFTER_S = 3.0

    def __init__(self, host: str, port: int, wait_s: float = 120.0) -> None:
        self.host, self.port = host, port
        self._checked = 0.0
        self._unreachable_since: float | None = None
        deadline = time.monotonic() + wait_s
        while not self._reachable():
            if time.monotonic() > deadline:
                raise UsageError(f"the TorchFT lighthouse on node 0 ({host}:{port}) is not reachable after {wait_s:.0f} s")
            time.sleep(0.2)

    @property
    def address(self) -> str:
        """What torchft.Manager takes as TORCHFT_LIGHTHOUSE."""
        return f"http://{self.host}:{self.port}"

    def _reachable(self) -> bool:
        return answers(self.host, self.port, 0.5)

    def who(self) -> str:
        """The lighthouse in a message: where it is."""
        return f"on node 0 ({self.host}:{self.port})"

    def died(self) -> str | None:
        """"unreachable for 3 s" once node 0's lighthouse stopped answering, else None (checked once a second)."""
        now = time.monotonic()
        if now - self._checked < 1.0:
            return None
        self._checked = now
        if self._reachable():
            self._unreachable_since = None
            return None
        self._unreachable_since = self._unreachable_since or now
        gone = now - self._unreachable_since
        return f"unreachable for {gone:.0f} s" if gone >= self.GONE_AFTER_S else None

    def stop(self) -> None:
        """Nothing to stop: node 0 runs it."""

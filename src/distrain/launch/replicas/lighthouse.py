"""TorchFT's lighthouse for `distrain run --replicas`: started before the groups, stopped after.

The lighthouse (Rust, in the ``torchft`` wheel; started by torchft_lighthouse.py, which skips the
``import torch`` of TorchFT's own ``torchft_lighthouse`` command) forms
the quorum of live replica groups at every step.  On one node it listens on loopback only;
across nodes node 0 runs it on the master address and the others reach it there
(:class:`RemoteLighthouse`).  Its
timeouts are short so that a dead group is noticed in well under a second: a group that has not
heartbeated (every 100 ms) for ``heartbeat_timeout_ms`` is dead, and a quorum waits at most
``join_timeout_ms`` for a group that still heartbeats but has not asked to join.

Why 700 ms and 1000 ms: the survivors' pause at a SIGKILL is the heartbeat timeout plus one
quorum change, and a replacement on the same node heartbeats within ~0.6 s, so the survivors'
quorum waits for it (one reconfiguration and heal instead of two); the figures per setting are
in benchmarks/recovery/RESULTS.md ("Lighthouse timeouts").
"""

from __future__ import annotations

import importlib.util
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

from distrain.contract import LIGHTHOUSE_START_TIMEOUT, NODE0_WAIT
from distrain.errors import UsageError
from distrain.net import reserve_port
from distrain.process.lineage import die_with_parent
from distrain.settings import parse_seconds

#: how the lighthouse is tuned for one machine (milliseconds)
QUORUM_TICK_MS = 50
JOIN_TIMEOUT_MS = 1000
HEARTBEAT_TIMEOUT_MS = 700  # see the module docstring
#: how long the lighthouse may take to listen, unless DISTRAIN_LIGHTHOUSE_START_TIMEOUT says
#: (seconds).  It listens within 0.6 s even at load 6 on 2 cores (torchft_lighthouse.py); the
#: bound is for a machine that is far slower still, never hit by a lighthouse that died (that is
#: reported at once)
START_TIMEOUT_S = 60.0
#: the runner that starts the lighthouse without importing torch (see its docstring)
RUNNER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "torchft_lighthouse.py")

EXTRA_HINT = "pip install 'distrain[ft]'"


def answers(host: str, port: int, timeout_s: float) -> bool:
    """True when something accepts a TCP connection on `host`:`port` within `timeout_s`."""
    with socket.socket() as s:
        s.settimeout(timeout_s)
        return s.connect_ex((host, port)) == 0


def lighthouse_program() -> list[str]:
    """The command running TorchFT's lighthouse (torchft_lighthouse.py); UsageError sans torchft."""
    if importlib.util.find_spec("torchft") is None:
        raise UsageError(f"--replicas needs TorchFT, which is not installed ({EXTRA_HINT})")
    # not TorchFT's own torchft_lighthouse command: it imports torch first (seconds under load)
    return [sys.executable, RUNNER]


#: how long another node waits for node 0's lighthouse and roll call, unless DISTRAIN_NODE0_WAIT
#: says
NODE0_WAIT_S = 120.0


def node0_wait_s() -> float:
    """DISTRAIN_NODE0_WAIT in seconds, else NODE0_WAIT_S; UsageError if malformed."""
    text = os.environ.get(NODE0_WAIT, "").strip()
    return parse_seconds(text, NODE0_WAIT) if text else NODE0_WAIT_S


def start_timeout_s() -> float:
    """DISTRAIN_LIGHTHOUSE_START_TIMEOUT in s, else START_TIMEOUT_S; UsageError if malformed."""
    text = os.environ.get(LIGHTHOUSE_START_TIMEOUT, "").strip()
    return parse_seconds(text, LIGHTHOUSE_START_TIMEOUT) if text else START_TIMEOUT_S


class Lighthouse:
    """A running ``torchft_lighthouse`` on ``host``:``port``; :meth:`stop` ends it."""

    def __init__(
        self, program: list[str], host: str = "127.0.0.1", port: int | None = None
    ) -> None:
        self.host = host
        # a port of our choosing is held from its choice until the lighthouse listens on it (it
        # binds with SO_REUSEADDR): no other program can take it in between (net.reserve_port)
        held = reserve_port(host) if port is None else None
        self.port = port if held is None else int(held.getsockname()[1])
        self.log = tempfile.TemporaryFile()  # its log; read only to say why it did not start
        try:
            self.proc = subprocess.Popen(
                [
                    *program,
                    "--min_replicas",
                    "1",
                    "--quorum_tick_ms",
                    str(QUORUM_TICK_MS),
                    "--join_timeout_ms",
                    str(JOIN_TIMEOUT_MS),
                    "--heartbeat_timeout_ms",
                    str(HEARTBEAT_TIMEOUT_MS),
                    "--bind",
                    f"{host}:{self.port}",
                ],
                stdin=subprocess.DEVNULL,
                stdout=self.log,
                stderr=self.log,
                preexec_fn=die_with_parent,  # never outlive a SIGKILLed launcher
            )
            ended = self._wait_listening(start_timeout_s())
        finally:
            if held is not None:
                held.close()
        if ended:
            raise UsageError(f"the TorchFT lighthouse did not start on {host}:{self.port}: {ended}")

    def _wait_listening(self, bound: float) -> str:
        """Empty once the lighthouse listens; else how it ended (its last stderr line), at once."""
        deadline = time.monotonic() + bound
        while not self._listens():
            if self.proc.poll() is not None:
                self.log.seek(0)
                err = self.log.read().decode(errors="replace")
                lines = [ln for ln in err.strip().splitlines() if ln.strip()]
                return lines[-1] if lines else f"exit code {self.proc.returncode}"
            if time.monotonic() > deadline:
                pid = self.proc.pid
                self.stop()
                raise UsageError(
                    f"the TorchFT lighthouse (pid {pid}) ran but did not listen on "
                    f"{self.host}:{self.port} "
                    f"within {bound:g} s (set {LIGHTHOUSE_START_TIMEOUT} to wait longer)"
                )
            time.sleep(0.05)
        return ""

    def _listens(self) -> bool:
        # the lighthouse itself listens on its port: a connect would also succeed to another
        # program that holds the port, while the lighthouse exits with "Address already in use"
        import psutil

        try:
            conns = psutil.Process(self.proc.pid).net_connections(kind="tcp")
        except psutil.Error:
            return False
        return any(c.status == psutil.CONN_LISTEN and c.laddr.port == self.port for c in conns)

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

    def __init__(self, host: str, port: int, wait_s: float | None = None) -> None:
        self.host, self.port = host, port
        wait_s = node0_wait_s() if wait_s is None else wait_s
        self._checked = 0.0
        self._unreachable_since: float | None = None
        deadline = time.monotonic() + wait_s
        while not self._reachable():
            if time.monotonic() > deadline:
                raise UsageError(
                    f"the TorchFT lighthouse on node 0 ({host}:{port}) is not reachable "
                    f"after {wait_s:g} s "
                    f"(set {NODE0_WAIT} to wait longer)"
                )
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
        """ "unreachable for 3 s" once node 0's lighthouse stopped answering, else None (each s)."""
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

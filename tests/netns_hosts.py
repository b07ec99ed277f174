"""Pretend machines for multi-node tests: Linux network namespaces joined by a bridge.

Each "host" is a namespace with its own network stack: ``lo`` plus ``eth0`` = 10.200.S.(i+1)/24,
plugged into a bridge that lives in a hub namespace of its own (nothing is added to the root
namespace).  The hostname still resolves to 127.0.0.1 inside them, exactly the trap real
clusters have.  Names carry the pid and a counter so parallel xdist workers never collide, and
everything is deleted afterwards, also when the test fails.  Traffic only ever goes to
addresses inside these namespaces.
"""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from conftest import kill_group

_counter = itertools.count()


def _ip(*argv: str) -> None:
    subprocess.run(["ip", *argv], check=True, capture_output=True, text=True, timeout=30)


@dataclass
class Hosts:
    """Namespaces `names[i]` with address `addrs[i]` on interface `iface`."""

    names: list[str]
    addrs: list[str]
    hub: str
    iface: str = "eth0"
    procs: list[subprocess.Popen[str]] = field(default_factory=list)

    def cmd(self, i: int, argv: list[str]) -> list[str]:
        """`argv` run inside host i."""
        return ["ip", "netns", "exec", self.names[i], *argv]

    def start(self, i: int, argv: list[str], log: Path, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
        """Start `argv` in host i in a new session, stdout+stderr to `log`; killed at teardown."""
        full = {**os.environ, "DISTRAIN_TEST_NODE": self.names[i], **(env or {})}
        handle = open(log, "w")  # noqa: SIM115 - closed when the process is reaped below
        proc = subprocess.Popen(self.cmd(i, argv), stdout=handle, stderr=subprocess.STDOUT, text=True, env=full, start_new_session=True)
        handle.close()
        self.procs.append(proc)
        return proc

    def wait(self, procs: list[subprocess.Popen[str]], timeout: float, logs: list[Path]) -> list[int]:
        """Exit codes of `procs`; on timeout kill them all and fail with their logs."""
        deadline = time.monotonic() + timeout
        codes = []
        for proc in procs:
            try:
                codes.append(proc.wait(timeout=max(0.1, deadline - time.monotonic())))
            except subprocess.TimeoutExpired:
                for p in procs:
                    kill_group(p)
                text = "\n".join(f"--- {log.name}\n{log.read_text()[-3000:]}" for log in logs)
                pytest.fail(f"multi-node job did not finish within {timeout}s\n{text}")
        return codes

    def kill_all(self) -> None:
        """SIGKILL every process group started here."""
        for proc in self.procs:
            kill_group(proc)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass


@contextmanager
def make_hosts(n: int) -> Iterator[Hosts]:
    """Create `n` hosts on one bridge; skip the test when namespaces cannot be made here."""
    if os.geteuid() != 0:
        pytest.skip("multi-node tests need root to create network namespaces")
    if shutil.which("ip") is None:
        pytest.skip("multi-node tests need the `ip` command (iproute2)")
    tag = f"dt{os.getpid() % 100000}x{next(_counter)}"
    subnet = 10 + (os.getpid() + next(_counter)) % 240
    hub = f"{tag}h"
    names = [f"{tag}n{i}" for i in range(n)]
    addrs = [f"10.200.{subnet}.{i + 1}" for i in range(n)]
    made: list[str] = []
    try:
        try:
            _ip("netns", "add", hub)
        except subprocess.CalledProcessError as err:
            pytest.skip(f"`ip netns add` failed here: {err.stderr.strip()}")
        made.append(hub)
        try:  # a later step can fail too (no veth/bridge support in this kernel or container)
            _ip("-n", hub, "link", "add", "br0", "type", "bridge")
            _ip("-n", hub, "link", "set", "br0", "up")
            for i, (name, addr) in enumerate(zip(names, addrs, strict=True)):
                _ip("netns", "add", name)
                made.append(name)
                inner, outer = f"{tag}a{i}", f"{tag}b{i}"
                _ip("link", "add", inner, "type", "veth", "peer", "name", outer)
                _ip("link", "set", inner, "netns", name)
                _ip("link", "set", outer, "netns", hub)
                _ip("-n", name, "link", "set", inner, "name", "eth0")
                _ip("-n", name, "addr", "add", f"{addr}/24", "dev", "eth0")
                _ip("-n", name, "link", "set", "eth0", "up")
                _ip("-n", name, "link", "set", "lo", "up")
                _ip("-n", hub, "link", "set", outer, "master", "br0")
                _ip("-n", hub, "link", "set", outer, "up")
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as err:
            detail = getattr(err, "stderr", "") or str(err)
            pytest.skip(f"network namespace setup failed here ({' '.join(map(str, err.cmd))}): {str(detail).strip()}")
        hosts = Hosts(names, addrs, hub)
        try:
            yield hosts
        finally:
            hosts.kill_all()
    finally:
        for name in reversed(made):
            subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=30)
        for i in range(n):  # a veth pair left in this namespace by a failed set-up step
            subprocess.run(["ip", "link", "del", f"{tag}a{i}"], capture_output=True, timeout=30)


"""Pretend machines for multi-node tests: Linux network namespaces joined by a bridge.

Each "host" is a namespace with its own network stack: ``lo`` plus ``eth0`` = 10.200.S.(i+1)/24,
plugged into a bridge that lives in a hub namespace of its own (nothing is added to the root
namespace).  ``rate="1gbit"`` (or :meth:`Hosts.shape` later) makes every link a slow one: a ``tc ...
tbf`` qdisc on both ends of each host's veth, so traffic between two hosts is limited in both
directions (netem, for delay and loss, does not exist on every kernel; tbf does).  The hostname
still resolves to 127.0.0.1 inside them, exactly the trap real clusters have.  Names carry the pid
and a counter so parallel xdist workers never collide, and everything is deleted afterwards, also
when the test fails.  Traffic only ever goes to addresses inside these namespaces.

Benchmarks use it too: ``sys.path.insert(0, "tests")``, ``from helpers.netns_hosts import hosts``,
then ``with hosts(2, rate="100mbit")``;
:func:`make_hosts` is the pytest flavour (it skips where namespaces cannot be made).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from helpers.processes import kill_group

_counter = itertools.count()


class Unavailable(RuntimeError):
    """Namespaces (or tc) cannot be used here: not root, no iproute2, or the kernel refuses."""


def _ip(*argv: str) -> None:
    subprocess.run(["ip", *argv], check=True, capture_output=True, text=True, timeout=30)


def tbf_args(rate: str) -> list[str]:
    """``tc qdisc replace`` arguments after the device: a token bucket of `rate` (tc units).

    The bucket holds 10 ms of traffic (at least 128 KiB, more than one 64 KiB GSO packet, which
    tbf would otherwise drop) and the queue 100 ms.
    """
    bits = _rate_bits(rate)
    burst = max(128 * 1024, int(bits / 8 * 0.01))
    return ["root", "tbf", "rate", rate, "burst", str(burst), "latency", "100ms"]


def _rate_bits(rate: str) -> float:
    units = {"kbit": 1e3, "mbit": 1e6, "gbit": 1e9, "bit": 1.0}
    for unit, scale in units.items():
        if rate.lower().endswith(unit) and rate[: -len(unit)].replace(".", "", 1).isdigit():
            return float(rate[: -len(unit)]) * scale
    raise ValueError(f"link rate must look like 100mbit, 1gbit or 10gbit (got {rate!r})")


@dataclass
class Hosts:
    """Namespaces `names[i]` with address `addrs[i]` on interface `iface`."""

    names: list[str]
    addrs: list[str]
    hub: str
    iface: str = "eth0"
    #: the hub-side end of each host's veth (in namespace `hub`)
    ports: list[str] = field(default_factory=list)
    rate: str | None = None
    procs: list[subprocess.Popen[str]] = field(default_factory=list)

    def shape(self, rate: str | None) -> None:
        """Limit each host's link to `rate` (tc units: 100mbit, 1gbit), both ways; None: none."""
        ends = [(name, self.iface) for name in self.names] + [
            (self.hub, port) for port in self.ports
        ]
        for ns, dev in ends:
            if rate is None:
                subprocess.run(
                    ["ip", "netns", "exec", ns, "tc", "qdisc", "del", "dev", dev, "root"],
                    capture_output=True,
                    timeout=30,
                )
                continue
            res = subprocess.run(
                ["ip", "netns", "exec", ns, "tc", "qdisc", "replace", "dev", dev, *tbf_args(rate)],
                capture_output=True,
                text=True,
                timeout=30,
            )
            if res.returncode != 0:
                raise Unavailable(
                    f"tc tbf on {dev} failed here: {res.stderr.strip() or res.returncode}"
                )
        self.rate = rate

    def cmd(self, i: int, argv: list[str]) -> list[str]:
        """`argv` run inside host i."""
        return ["ip", "netns", "exec", self.names[i], *argv]

    def start(
        self,
        i: int,
        argv: list[str],
        log: Path,
        env: dict[str, str] | None = None,
        err_log: Path | None = None,
    ) -> subprocess.Popen[str]:
        """Start `argv` in host i, new session, output in `log`/`err_log`; killed at teardown."""
        full = {**os.environ, "DTEST_NODE": self.names[i], **(env or {})}
        handle = open(log, "w")  # noqa: SIM115 - closed right after the child has inherited it
        err = open(err_log, "w") if err_log else None  # noqa: SIM115 - likewise
        proc = subprocess.Popen(
            self.cmd(i, argv),
            stdout=handle,
            stderr=err or subprocess.STDOUT,
            text=True,
            env=full,
            start_new_session=True,
        )
        handle.close()
        if err:
            err.close()
        self.procs.append(proc)
        return proc

    def wait(
        self, procs: list[subprocess.Popen[str]], timeout: float, logs: list[Path]
    ) -> list[int]:
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

    def pids(self, i: int) -> list[str]:
        """The processes in node `i`'s namespace."""
        out = subprocess.run(
            ["ip", "netns", "pids", self.names[i]], capture_output=True, text=True, timeout=30
        )
        return out.stdout.split()

    def kill_node(self, i: int) -> int:
        """SIGKILL every process in node `i`'s namespace at once (the machine dies); how many."""
        pids = [int(p) for p in self.pids(i)]
        machine_dies(pids)
        return len(pids)

    def kill_all(self) -> None:
        """SIGKILL every process group started here."""
        for proc in self.procs:
            kill_group(proc)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass


def machine_dies(pids: list[int], signals: tuple[signal.Signals, ...] = (signal.SIGKILL,)) -> None:
    """Send `signals` to every process of a pretend machine, then remove the named semaphores
    they had open: a real machine's /dev/shm dies with it, but these share this one. Python's
    multiprocessing names a semaphore (``/dev/shm/sem.mp-*``) under a forkserver or spawn start
    and leaves its removal to the creator's exit or its resource tracker, both killed here: 7 of
    them stayed behind each elastic node loss, 254 after one run of the suite (2026-11-30).
    The processes are stopped first, so none makes one between the look and the end."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGSTOP)
    named = named_semaphores(pids)
    for pid in pids:
        for sig in signals:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
    forget(named)


def forget(semaphores: set[str]) -> None:
    """Remove the names of a dead machine's semaphores (a process still mapping one keeps it
    until it dies: only the name goes)."""
    for path in semaphores:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


def named_semaphores(pids: list[int]) -> set[str]:
    """The /dev/shm semaphores the processes `pids` have mapped. glibc's ``sem_open`` maps a
    temporary file and links it to the name, so a mapping shows the temporary name (deleted):
    the name is the ``sem.*`` file of the same inode."""
    inodes = set()
    for pid in pids:
        try:
            with open(f"/proc/{pid}/maps") as maps:
                lines = maps.read().splitlines()
        except OSError:  # gone already, or not ours to read
            continue
        for line in lines:
            fields = line.split(maxsplit=5)
            if len(fields) == 6 and fields[5].startswith("/dev/shm/sem."):
                inodes.add(int(fields[4]))
    with os.scandir("/dev/shm") as entries:
        return {e.path for e in entries if e.name.startswith("sem.") and e.inode() in inodes}


@contextmanager
def make_hosts(n: int, rate: str | None = None) -> Iterator[Hosts]:
    """Create `n` hosts on one bridge (links limited to `rate` if given); else skip the test."""
    try:
        with hosts(n, rate) as made:
            yield made
    except Unavailable as err:
        pytest.skip(str(err))


@contextmanager
def hosts(n: int, rate: str | None = None) -> Iterator[Hosts]:
    """Create `n` hosts on one bridge, links limited to `rate` (None: no limit); Unavailable."""
    if os.geteuid() != 0:
        raise Unavailable("multi-node tests need root to create network namespaces")
    if shutil.which("ip") is None:
        raise Unavailable("multi-node tests need the `ip` command (iproute2)")
    if rate is not None and shutil.which("tc") is None:
        raise Unavailable("slow-link tests need the `tc` command (iproute2)")
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
            raise Unavailable(f"`ip netns add` failed here: {err.stderr.strip()}") from None
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
            raise Unavailable(
                f"network namespace setup failed here ({' '.join(map(str, err.cmd))}): "
                f"{str(detail).strip()}"
            ) from None
        made_hosts = Hosts(names, addrs, hub, ports=[f"{tag}b{i}" for i in range(n)])
        try:
            if rate is not None:
                made_hosts.shape(rate)
            yield made_hosts
        finally:
            made_hosts.kill_all()
    finally:
        for name in reversed(made):
            subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=30)
        for i in range(n):  # a veth pair left in this namespace by a failed set-up step
            subprocess.run(["ip", "link", "del", f"{tag}a{i}"], capture_output=True, timeout=30)

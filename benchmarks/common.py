"""What the benchmark drivers share: paths, the environment of the jobs they start, ending a job,
network namespace pairs and the load average.

A driver in a study folder (benchmarks/<study>/x.py) imports it with

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/common.py
    from common import PY, REPO, env  # noqa: E402

and is run by path from anywhere (``python3 benchmarks/<study>/x.py``).  Job scripts that a
driver launches (workers) do not import it: they run under a launcher and stay plain.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

import psutil

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
SRC = REPO / "src"
TESTS = REPO / "tests"
PY = sys.executable
#: `distrain run` and `torchrun` of this interpreter (the checkout's distrain via env())
RUN = [PY, "-m", "distrain.cli", "run"]
TORCHRUN = [PY, "-m", "torch.distributed.run"]


def env(**extra: str) -> dict[str, str]:
    """os.environ with this checkout's src/ first on PYTHONPATH, plus `extra` (a driver's jobs)."""
    path = [str(SRC), *(p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p)]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(path), **extra}


def loadavg() -> str:
    """/proc/loadavg as one line: the 1, 5 and 15-minute load, running/total tasks, last pid."""
    return Path("/proc/loadavg").read_text().strip()


def kill_tree(proc: subprocess.Popen) -> None:  # type: ignore[type-arg]
    """SIGKILL `proc`, every process below it and its process group; the already gone are ignored.

    Launchers start workers in sessions of their own, so killing the launcher's group alone would
    leave them behind: the tree is walked first.
    """
    try:
        tree = psutil.Process(proc.pid).children(recursive=True)
    except psutil.Error:
        tree = []
    for child in tree:
        with contextlib.suppress(psutil.Error):
            child.kill()
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


def run_bounded(
    cmd: list[str], job_env: dict[str, str], timeout: float
) -> tuple[str | None, int | None]:
    """Run `cmd` in a session of its own: (stdout and stderr, exit code), or (None, None) when it
    was still running after `timeout` seconds (then it is killed with every process below it)."""
    proc = subprocess.Popen(
        cmd,
        env=job_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_tree(proc)
        proc.communicate()
        return None, None
    return out, proc.returncode


def _ip(*argv: str) -> None:
    subprocess.run(["ip", *argv], check=True, capture_output=True, timeout=30)


def veth_pair(tag: str, subnet: str) -> tuple[list[str], list[str]]:
    """Namespaces `tag`n0, `tag`n1 joined by a veth pair, addresses `subnet`.1 and .2 (as root).

    Returns (names, addresses); remove them with delete_pair(tag).  The tests' fixture
    (tests/helpers/netns_hosts.py) joins hosts through a bridge instead and can shape the links.
    """
    names, addrs = [f"{tag}n0", f"{tag}n1"], [f"{subnet}.1", f"{subnet}.2"]
    _ip("link", "add", f"{tag}a", "type", "veth", "peer", "name", f"{tag}b")
    for name, end, addr in zip(names, (f"{tag}a", f"{tag}b"), addrs, strict=True):
        _ip("netns", "add", name)
        _ip("link", "set", end, "netns", name)
        _ip("-n", name, "addr", "add", f"{addr}/24", "dev", end)
        _ip("-n", name, "link", "set", end, "up")
        _ip("-n", name, "link", "set", "lo", "up")
    return names, addrs


def kill_namespace(name: str) -> None:
    """SIGKILL every process in network namespace `name` at once (the machine dies)."""
    pids = subprocess.run(
        ["ip", "netns", "pids", name], capture_output=True, text=True, timeout=30
    ).stdout.split()
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(pid), signal.SIGKILL)


def delete_pair(tag: str) -> None:
    """Remove what veth_pair(tag, ...) made, also after a set-up that stopped half-way."""
    for name in (f"{tag}n0", f"{tag}n1"):
        subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=30)
    subprocess.run(
        ["ip", "link", "del", f"{tag}a"], capture_output=True, timeout=30
    )  # only if still in the root namespace

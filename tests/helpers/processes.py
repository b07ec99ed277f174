"""Real processes with a hard time bound, and ending them for good."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest


def run(
    cmd: list[str] | str,
    timeout: float = 120,
    env: dict[str, str] | None = None,
    cwd: str | Path | None = None,
    check: bool = False,
) -> subprocess.CompletedProcess[str]:
    """Run `cmd` in its own process group; on timeout kill the whole group and fail the test."""
    full_env = dict(os.environ)
    if env:
        full_env.update(env)
    proc = subprocess.Popen(
        cmd,
        shell=isinstance(cmd, str),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=full_env,
        cwd=str(cwd) if cwd else None,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_group(proc)
        out, err = proc.communicate()
        pytest.fail(
            f"timed out after {timeout}s: {cmd}\n--- stdout\n{out[-4000:]}\n--- "
            f"stderr\n{err[-4000:]}"
        )
    finally:
        kill_group(proc)
    result = subprocess.CompletedProcess(cmd, proc.returncode, out, err)
    if check and proc.returncode != 0:
        pytest.fail(
            f"exit {proc.returncode}: {cmd}\n--- stdout\n{out[-4000:]}\n--- stderr\n{err[-4000:]}"
        )
    return result


def distrain_run(
    *args: str,
    timeout: float = 240,
    env: dict[str, str] | None = None,
    cwd: str | Path | None = None,
    check: bool = False,
) -> subprocess.CompletedProcess[str]:
    """`distrain run ARGS` as a user types it (this tree's ``python -m distrain.cli run``): the
    one way the job tests start a job and wait for it, bounded by `timeout` (the whole process
    tree killed after); `check` fails the test on a non-zero exit with both streams' tails."""
    cmd = [python(), "-m", "distrain.cli", "run", *args]
    return run(cmd, timeout=timeout, env=env, cwd=cwd, check=check)


def kill_group(proc: subprocess.Popen[str]) -> None:
    """SIGKILL `proc`, every descendant and its process group, ignoring the gone.

    torchrun starts each worker in a session of its own, so killing the launcher's process group
    alone would leave workers behind: walk the process tree first.
    """
    import psutil

    try:
        tree = psutil.Process(proc.pid).children(recursive=True)
    except psutil.Error:
        tree = []
    for child in tree:
        try:
            child.kill()
        except psutil.Error:
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def python() -> str:
    """The interpreter running the tests."""
    return sys.executable


#: ports held for this test process's life (held_port)
_HELD_PORTS: list[socket.socket] = []


def held_port() -> int:
    """A port a test names to a job (``--master-port``, ``MASTER_PORT``), held until the test
    process exits (distrain.net.reserve_port): a listener that sets ``SO_REUSEADDR`` (torch's
    TCPStore, distrain's stores) binds it, but no connection takes it as its source port first,
    as one can take a port from a bind to port 0 that was closed again (pytorch#126510)."""
    from distrain.net import reserve_port

    sock = reserve_port("127.0.0.1")
    _HELD_PORTS.append(sock)
    return int(sock.getsockname()[1])

"""A one-node job listens on loopback only: every listening socket of its process tree, while it trains.

Real jobs (tests/scripts/replica_job.py, endless), their listeners read from each process's
sockets with psutil: the launcher, the agents' stores, rank 0's store, gloo, and under
``--replicas`` the TorchFT lighthouse and each group's manager server (which TorchFT binds on
every interface: train/ft_bind.py).
"""

from __future__ import annotations

import importlib.util
import ipaddress
import subprocess
import time
from pathlib import Path

import psutil
import pytest
from helpers import SCRIPTS, kill_group, python

SCRIPT = str(SCRIPTS / "replica_job.py")


def _loopback(ip: str) -> bool:
    addr = ipaddress.ip_address(ip.split("%")[0])
    mapped = getattr(addr, "ipv4_mapped", None)  # ::ffff:127.0.0.1
    return addr.is_loopback or (mapped is not None and mapped.is_loopback)


def listeners(root: int) -> set[tuple[str, int, int, str]]:
    """(address, port, pid, command) of every listening TCP socket of `root` and its descendants."""
    try:
        top = psutil.Process(root)
        procs = [top, *top.children(recursive=True)]
    except psutil.Error:
        return set()
    found = set()
    for proc in procs:
        try:
            name = " ".join(proc.cmdline()[:2])[:60]  # the lighthouse is a Python program
            for conn in proc.net_connections(kind="tcp"):
                if conn.status == psutil.CONN_LISTEN:
                    found.add((conn.laddr.ip, conn.laddr.port, proc.pid, name))
        except psutil.Error:  # ended meanwhile
            continue
    return found


def _wait_for(paths: list[Path], proc: subprocess.Popen[str], bound_s: float) -> None:
    deadline = time.monotonic() + bound_s
    while not all(p.exists() for p in paths):
        if proc.poll() is not None:
            pytest.fail(f"the job ended (exit {proc.returncode}):\n{proc.stderr.read()[-3000:]}")  # type: ignore[union-attr]
        assert time.monotonic() < deadline, f"not training after {bound_s:.0f} s: {paths}"
        time.sleep(0.3)


JOBS = {
    # each group's rank 0 has committed a step: its TorchFT manager server is up
    "replicas": (["--replicas", "2", "-n", "1"], ["first.0.0", "first.1.0"]),
    # both ranks are past ctx.checkpointer().restore: group formed, gloo connected
    "plain": (["-n", "2"], ["resumed"]),
}


@pytest.mark.slow
@pytest.mark.timeout(240)
@pytest.mark.parametrize("kind", sorted(JOBS))
def test_one_node_job_listens_on_loopback_only(tmp_path: Path, kind: str) -> None:
    """Every listener of a one-node job (and of its lighthouse) is on 127.0.0.1 or ::1."""
    if kind == "replicas" and importlib.util.find_spec("torchft") is None:
        pytest.skip("torchft not installed (pip install 'distrain[ft]')")
    flags, marks = JOBS[kind]
    out = tmp_path / "out"
    out.mkdir()
    cmd = [python(), "-m", "distrain.cli", "run", *flags, SCRIPT, "--out", str(out),
           "--dir", str(tmp_path / "ckpt"), "--steps", "1000000"]  # fmt: skip
    proc = subprocess.Popen(
        cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    seen: set[tuple[str, int, int, str]] = set()
    try:
        _wait_for([out / m for m in marks], proc, 180)
        if kind == "plain":  # both ranks wrote their line
            deadline = time.monotonic() + 60
            while len((out / "resumed").read_text().splitlines()) < 2:
                assert time.monotonic() < deadline, "rank 1 never reached training"
                time.sleep(0.3)
        for _ in range(5):  # a few looks while it trains
            seen |= listeners(proc.pid)
            time.sleep(0.3)
        assert proc.poll() is None, "the job ended while being looked at"
    finally:
        kill_group(proc)
        proc.wait(timeout=30)
    wide = sorted(s for s in seen if not _loopback(s[0]))
    assert not wide, f"listening beyond loopback: {wide} (all: {sorted(seen)})"
    programs = [name for _, _, _, name in seen]
    if kind == "replicas":  # the lighthouse and both groups' workers were among those looked at
        assert any("lighthouse" in name for name in programs), sorted(seen)
    ranks = {pid for _, _, pid, name in seen if name.startswith("distrain rank")}
    assert len(ranks) == 2, sorted(seen)  # both workers (their process title) had listeners

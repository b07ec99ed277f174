"""A one-node job listens on loopback only: every listening socket of its process tree, in training.

Real jobs (tests/scripts/replica_job.py, endless), their listeners read from each process's
sockets (/proc/<pid>/net and fds): the launcher, the agents' stores, rank 0's store, gloo, and under
``--replicas`` the TorchFT lighthouse and each group's manager server (which TorchFT binds on
every interface: worker/replicas/bind.py).
"""

from __future__ import annotations

import contextlib
import importlib.util
import ipaddress
import os
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


def _address(hexaddr: str) -> str:
    raw = bytes.fromhex(hexaddr)  # /proc/net/tcp*: 32-bit words in host (little-endian) order
    words = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
    return str(ipaddress.ip_address(words))


def _own_listeners(pid: int) -> set[tuple[str, int]]:
    # read from /proc/<pid>/net (that process's network namespace: psutil reads the caller's,
    # which misses the processes of a namespace host) and kept when the socket is one of its fds
    fds = Path(f"/proc/{pid}/fd")
    inodes = set()
    for fd in fds.iterdir():
        with contextlib.suppress(OSError):
            link = os.readlink(fd)
            if link.startswith("socket:["):
                inodes.add(link[8:-1])
    found = set()
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            cols = line.split()
            if cols[3] == "0A" and cols[9] in inodes:  # 0A: LISTEN
                host, port = cols[1].rsplit(":", 1)
                found.add((_address(host), int(port, 16)))
    return found


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
            # "python3 torchft_lighthouse.py", or a worker's title ("distrain rank 0/1 · …")
            argv = [os.path.basename(a) if a.startswith("/") else a for a in proc.cmdline()[:2]]
            name = " ".join(argv)[:60]
            found |= {(ip, port, proc.pid, name) for ip, port in _own_listeners(proc.pid)}
        except (psutil.Error, OSError):  # ended meanwhile
            continue
    return found


def _wait_for(paths: list[Path], proc: subprocess.Popen[str], bound_s: float) -> None:
    deadline = time.monotonic() + bound_s
    while not all(p.exists() for p in paths):
        if proc.poll() is not None:
            err = proc.stderr.read()[-3000:]  # type: ignore[union-attr]
            pytest.fail(f"the job ended (exit {proc.returncode}):\n{err}")
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


@pytest.mark.netns
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_two_node_replicas_listen_on_their_node_address_only(tmp_path: Path) -> None:
    """--replicas 2 --nnodes 2 in two network namespaces: each node's listeners are on that node's
    address (or loopback), never on every interface."""
    if importlib.util.find_spec("torchft") is None:
        pytest.skip("torchft not installed (pip install 'distrain[ft]')")
    from helpers.netns_hosts import make_hosts

    out = tmp_path / "out"
    out.mkdir()
    seen: list[set[tuple[str, int, int, str]]] = [set(), set()]
    with make_hosts(2) as hosts:
        procs = []
        for node in range(2):
            cmd = [python(), "-m", "distrain.cli", "run", "--replicas", "2", "-n", "1", "--nnodes",
                   "2",
                   "--node-rank", str(node), "--master-addr", hosts.addrs[0], "--master-port",
                   "29500",
                   SCRIPT, "--out", str(out), "--dir", str(tmp_path / f"ckpt{node}"), "--steps",
                   "1000000"]  # fmt: skip
            procs.append(hosts.start(node, cmd, tmp_path / f"node{node}.log"))
        try:
            deadline = time.monotonic() + 200
            while not all((out / f"first.{g}.0").exists() for g in (0, 1)):
                logs = [(tmp_path / f"node{n}.log").read_text()[-2000:] for n in (0, 1)]
                assert all(p.poll() is None for p in procs), logs
                assert time.monotonic() < deadline, logs
                time.sleep(0.3)
            for _ in range(5):
                for node in (0, 1):
                    seen[node] |= listeners(procs[node].pid)
                time.sleep(0.3)
        finally:
            hosts.kill_all()
    for node in (0, 1):
        wide = sorted(s for s in seen[node] if s[0] != hosts.addrs[node] and not _loopback(s[0]))
        assert not wide, f"node {node} ({hosts.addrs[node]}) listens beyond its address: {wide}"
    managers = [s for s in seen[1] if s[0] == hosts.addrs[1] and s[3].startswith("distrain rank")]
    assert managers, sorted(seen[1])  # group 1's rank 0 (manager server, store) was looked at

"""A live job seen from outside: every listener of a one-node job is on loopback, and every
worker has a process title naming its rank and script (ps, top, nvidia-smi)."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import psutil
import pytest
from helpers import REPO, held_port, kill_group, python, run

HELD = str(REPO / "tests" / "scripts" / "held_job.py")
WORLD = 2


def _listeners(pids: set[int]) -> list[tuple[int, str, int]]:
    """(pid, ip, port) of each TCP socket listening in `pids` (seen by the kernel, as ss -ltnp)."""
    return [
        (c.pid, c.laddr.ip, c.laddr.port)
        for c in psutil.net_connections(kind="tcp")
        if c.status == psutil.CONN_LISTEN and c.pid in pids
    ]


def _hold(
    cmd: list[str], out: Path
) -> tuple[subprocess.Popen[str], list[psutil.Process], list[tuple[int, str, int]]]:
    """Start the held job; when every rank is ready return its process tree and listeners."""
    out.mkdir()
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )
    deadline = time.monotonic() + 150
    while sum((out / f"ready{r}").exists() for r in range(WORLD)) < WORLD:
        if proc.poll() is not None or time.monotonic() > deadline:
            kill_group(proc)
            pytest.fail(
                f"job did not come up (exit {proc.returncode}):\n{proc.communicate()[0][-3000:]}"
            )
        time.sleep(0.3)
    time.sleep(0.5)  # rank 0's store and the agent's are up before any rank is ready
    tree = [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]
    ranks = [psutil.Process(int((out / f"ready{r}").read_text().split()[0])) for r in range(WORLD)]
    listeners = _listeners({p.pid for p in tree} | {p.pid for p in ranks})
    return proc, ranks, listeners


def _release(proc: subprocess.Popen[str], out: Path) -> str:
    (out / "release").touch()
    try:
        text, _ = proc.communicate(timeout=90)
    finally:
        kill_group(proc)
    assert proc.returncode == 0, text[-3000:]
    return text


CASES = {
    "distrain-run": ["run", "-n", str(WORLD)],
    "distrain-run-master-port": ["run", "-n", str(WORLD), "--master-port", "0"],  # replaced below
    "spawn": None,
    "mpirun": ["run", "--launcher", "mpirun", "-n", str(WORLD)],
}


@pytest.mark.timeout(300)
@pytest.mark.parametrize("case", list(CASES))
def test_one_node_job_listens_on_loopback_only(tmp_path: Path, case: str) -> None:
    if case == "mpirun":
        if shutil.which("mpirun") is None:
            pytest.skip("Open MPI not installed (apt-get install openmpi-bin)")
        pytest.importorskip("mpi4py")
    out = tmp_path / "job"
    if case == "spawn":
        cmd = [python(), HELD, str(out), "--spawn", str(WORLD)]
    else:
        args = list(CASES[case] or [])
        if case == "distrain-run-master-port":
            args[-1] = str(held_port())
        cmd = [python(), "-m", "distrain.cli", *args, HELD, str(out)]
    proc, _, listeners = _hold(cmd, out)
    if case == "mpirun":  # Open MPI's own listeners (mpirun's daemon, the ranks' transports) are
        # Open MPI's to configure; the job's own is rank 0's store on MASTER_PORT
        port = int((out / "ready0").read_text().split()[1])
        listeners = [entry for entry in listeners if entry[2] == port]
    try:
        # rank 0's store, and under distrain run the agent's rendezvous store, plus gloo's pairs
        assert len(listeners) >= (2 if case.startswith("distrain-run") else 1), listeners
        wide = [entry for entry in listeners if not entry[1].startswith("127.")]
        assert not wide, f"listening beyond loopback: {wide}"
    finally:
        _release(proc, out)


@pytest.mark.timeout(300)
def test_store_address_that_cannot_be_bound_is_an_error(tmp_path: Path) -> None:
    """--master-addr that is not this machine's: one line, no fall-back to every interface."""
    result = run(
        [
            python(),
            "-m",
            "distrain.cli",
            "run",
            "-n",
            "2",
            "--master-addr",
            "192.0.2.7",
            "--master-port",
            str(held_port()),
            HELD,
            str(tmp_path),
        ],
        timeout=120,
    )
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert lines and "cannot listen on 192.0.2.7" in lines[-1], result.stderr[-2000:]
    assert "Traceback" not in result.stderr


@pytest.mark.timeout(300)
def test_workers_have_process_titles(tmp_path: Path) -> None:
    """Fast-start workers show `distrain rank R/W · held_job.py DIR`, not the fork server's line."""
    out = tmp_path / "job"
    proc, ranks, _ = _hold(
        [python(), "-m", "distrain.cli", "run", "-n", str(WORLD), HELD, str(out)], out
    )
    try:
        for r, p in enumerate(ranks):
            ps = subprocess.run(
                ["ps", "-ww", "-o", "args=", "-p", str(p.pid)], capture_output=True, text=True
            ).stdout.strip()
            assert ps == f"distrain rank {r}/{WORLD} · held_job.py {out}", ps
            assert "forkserver" not in " ".join(p.cmdline())
    finally:
        _release(proc, out)
    assert os.path.exists(out / "release")

"""Shared test helpers: run real processes with a hard time bound and clean up after them."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SRC = REPO / "src"
EXAMPLES = REPO / "examples"

# Subprocesses (launchers and their workers) must import this checkout's distrain.
os.environ["PYTHONPATH"] = os.pathsep.join([str(SRC), str(REPO / "tests")] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else []))
# The suite tests the CPU/gloo paths (CI has no GPU); on a GPU machine they must stay on CPU.
# tests/test_gpu.py clears this to exercise CUDA + NCCL.
os.environ.setdefault("DISTRAIN_DEVICE", "cpu")
# torchrun warns about this for every job; the tests pin it explicitly where it matters.
os.environ.setdefault("OMP_NUM_THREADS", "1")
if str(SRC) not in sys.path:
    sys.path.insert(0, str(SRC))


def run(cmd: list[str] | str, timeout: float = 120, env: dict[str, str] | None = None, cwd: str | Path | None = None, check: bool = False) -> subprocess.CompletedProcess[str]:
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
        pytest.fail(f"timed out after {timeout}s: {cmd}\n--- stdout\n{out[-4000:]}\n--- stderr\n{err[-4000:]}")
    finally:
        kill_group(proc)
    result = subprocess.CompletedProcess(cmd, proc.returncode, out, err)
    if check and proc.returncode != 0:
        pytest.fail(f"exit {proc.returncode}: {cmd}\n--- stdout\n{out[-4000:]}\n--- stderr\n{err[-4000:]}")
    return result


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


#: variables a launcher sets; a test's jobs must not inherit them from another test or the shell
LAUNCHER_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE",
                 "MASTER_ADDR", "MASTER_PORT", "DISTRAIN_SPAWN", "DISTRAIN_LAUNCHER")
LAUNCHER_PREFIXES = ("TORCHELASTIC_", "OMPI_COMM_WORLD_", "PMI_", "MPI_LOCAL", "SLURM_", "HOROVOD_")


@pytest.fixture(autouse=True)
def _isolated_environment() -> object:
    """Restore os.environ after every test (in-process tests call init(), which exports RANK…)
    and start each test without launcher variables, so its subprocesses see only its own."""
    saved = dict(os.environ)
    for key in list(os.environ):
        if key in LAUNCHER_VARS or key.startswith(LAUNCHER_PREFIXES):
            del os.environ[key]
    yield
    os.environ.clear()
    os.environ.update(saved)


@pytest.fixture
def repo() -> Path:
    """The repository root."""
    return REPO


def digits_accuracy(stdout: str) -> float:
    """The final test accuracy examples/train_digits.py prints ("done: test acc 0.9805 ...")."""
    found = re.findall(r"done: test acc ([0-9.]+)", stdout)
    assert found, f"no 'done: test acc' line in the output:\n{stdout[-2000:]}"
    return float(found[-1])

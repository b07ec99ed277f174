"""tools/doctor/machine/limits.py: open files, locked memory, OMP threads vs cores (patched
limits)."""

from __future__ import annotations

import os
import resource
from types import SimpleNamespace

import pytest

from distrain.tools.doctor.machine import limits


@pytest.fixture
def machine(monkeypatch: pytest.MonkeyPatch) -> dict[str, object]:
    """A machine with settable limits, cores and RDMA devices; returns the knobs."""
    knobs: dict[str, object] = {
        "nofile": (65536, 65536),
        "memlock": (65536, 65536),
        "cores": 8,
        "rdma": False,
    }
    monkeypatch.setattr(resource, "getrlimit",
                        lambda which: knobs["nofile"] if which == resource.RLIMIT_NOFILE
                        else knobs["memlock"])  # fmt: skip
    monkeypatch.setattr(limits, "usable_cores", lambda: knobs["cores"])
    fake_path = SimpleNamespace(isdir=lambda path: bool(knobs["rdma"]))
    monkeypatch.setattr(
        limits,
        "os",
        SimpleNamespace(path=fake_path, listdir=lambda path: ["mlx5_0"], environ=os.environ),
    )
    return knobs


def _by_id(checks: list) -> dict:
    return {c.id: c for c in checks}


def test_a_healthy_cpu_machine(machine: dict[str, object]) -> None:
    checks = _by_id(limits.probe(has_gpu=False))
    assert [c.status for c in checks.values()] == ["ok", "ok", "ok"]
    assert checks["limits.memlock"].seen == "soft 64 KiB (no RDMA devices)"
    assert checks["limits.threads"].seen == "OMP_NUM_THREADS unset; 8 usable core(s)"


def test_few_open_files_warn(machine: dict[str, object]) -> None:
    machine["nofile"] = (1024, 4096)
    check = _by_id(limits.probe())["limits.nofile"]
    assert (
        check.status == "warn"
        and check.seen == "soft 1024, hard 4096 (< 4096)"
        and "ulimit -n" in (check.fix or "")
    )


def test_locked_memory_matters_with_gpus_or_rdma(machine: dict[str, object]) -> None:
    assert _by_id(limits.probe(has_gpu=True))["limits.memlock"].status == "warn"
    machine["rdma"] = True
    check = _by_id(limits.probe(has_gpu=False))["limits.memlock"]
    assert check.status == "warn" and check.seen.endswith("with InfiniBand/RDMA devices")
    machine["memlock"] = (resource.RLIM_INFINITY, resource.RLIM_INFINITY)
    assert _by_id(limits.probe(has_gpu=True))["limits.memlock"].status == "ok"


@pytest.mark.parametrize(
    ("omp", "local", "status", "seen"),
    [("4", "2", "ok", "OMP_NUM_THREADS=4 x 2 local process(es), 8 usable core(s)"),
     ("4", "4", "warn",
      "OMP_NUM_THREADS=4 x 4 local process(es) > 8 usable core(s): oversubscribed"),
     ("0", "1", "warn", "OMP_NUM_THREADS='0' is not a positive integer"),
     ("many", "1", "warn", "OMP_NUM_THREADS='many' is not a positive integer")],
)  # fmt: skip
def test_threads_against_cores(
    machine: dict[str, object],
    monkeypatch: pytest.MonkeyPatch,
    omp: str,
    local: str,
    status: str,
    seen: str,
) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", omp)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", local)
    check = _by_id(limits.probe())["limits.threads"]
    assert (check.status, check.seen) == (status, seen)


def test_oversubscription_fix_names_the_right_thread_count(
    machine: dict[str, object], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "8")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "3")
    assert "Set OMP_NUM_THREADS=2 " in (_by_id(limits.probe())["limits.threads"].fix or "")

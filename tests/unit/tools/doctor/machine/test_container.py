"""tools/doctor/machine/container.py: container runtime evidence and the /dev/shm size rule
(patched)."""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace

import pytest

from distrain.tools.doctor.machine import container


@pytest.fixture
def bare_metal(monkeypatch: pytest.MonkeyPatch) -> dict[str, object]:
    """No marker files, a plain cgroup; the returned dict sets which paths exist, cgroup text."""
    facts: dict[str, object] = {"exists": set(), "cgroup": "0::/init.scope\n"}
    fake_path = SimpleNamespace(exists=lambda p: p in facts["exists"])  # type: ignore[operator]
    monkeypatch.setattr(
        container, "os", SimpleNamespace(path=fake_path, environ=os.environ, statvfs=os.statvfs)
    )
    monkeypatch.setattr(
        container, "_read", lambda path: facts["cgroup"] if path == "/proc/1/cgroup" else ""
    )
    return facts


def test_nothing_detected_on_bare_metal(bare_metal: dict[str, object]) -> None:
    assert container.detect_container() == {"runtime": None, "evidence": []}


def test_kubernetes_wins_over_docker_and_every_clue_is_listed(
    bare_metal: dict[str, object], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
    bare_metal["exists"] = {"/.dockerenv"}
    bare_metal["cgroup"] = "0::/kubepods/burstable/pod1\n"
    found = container.detect_container()
    assert found["runtime"] == "kubernetes"
    assert found["evidence"] == [
        "KUBERNETES_SERVICE_HOST is set",
        "/.dockerenv exists",
        "/proc/1/cgroup mentions kubepods",
    ]


@pytest.mark.parametrize(
    ("exists", "cgroup", "env", "runtime"),
    [({"/run/.containerenv"}, "", {}, "podman"),
     (set(), "0::/system.slice/docker-abc.scope", {}, "docker"),
     (set(), "", {"container": "systemd-nspawn"}, "systemd-nspawn"),
     (set(), "", {"APPTAINER_CONTAINER": "/img.sif"}, "apptainer")],
)  # fmt: skip
def test_runtime_from_one_clue(bare_metal: dict[str, object], monkeypatch: pytest.MonkeyPatch,
                               exists: set[str], cgroup: str, env: dict[str, str],
                               runtime: str) -> None:  # fmt: skip
    bare_metal["exists"], bare_metal["cgroup"] = exists, cgroup
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    assert container.detect_container()["runtime"] == runtime


def _statvfs(size: int, free: int) -> SimpleNamespace:
    return SimpleNamespace(f_blocks=size // 4096, f_frsize=4096, f_bavail=free // 4096)


@pytest.mark.parametrize(
    ("size", "free", "status"),
    [
        (64 * 2**20, 64 * 2**20, "fail"),
        (512 * 2**20, 512 * 2**20, "warn"),
        (8 * 2**30, 100 * 2**20, "warn"),
        (8 * 2**30, 6 * 2**30, "ok"),
    ],
)
def test_shm_size_rule(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, size: int, free: int, status: str
) -> None:
    monkeypatch.setenv("DISTRAIN_SHM_PATH", str(tmp_path))
    monkeypatch.setattr(
        container, "os", SimpleNamespace(environ=os.environ, statvfs=lambda p: _statvfs(size, free))
    )
    check = container.probe_shm(None)
    assert check.status == status and check.data["path"] == str(tmp_path)
    assert (check.fix is None) == (status == "ok")


def test_shm_seen_text(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        container,
        "os",
        SimpleNamespace(environ=os.environ, statvfs=lambda p: _statvfs(64 * 2**20, 32 * 2**20)),
    )
    check = container.probe_shm("docker")
    assert (
        check.seen == "/dev/shm: 64 MiB (32 MiB free): DataLoader workers will die with 'Bus error'"
    )
    assert "--ipc=host" in (check.fix or "")


def test_unreadable_shm_is_a_warning(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DISTRAIN_SHM_PATH", str(tmp_path / "absent"))
    check = container.probe_shm(None)
    assert check.status == "warn" and check.data["size_bytes"] is None

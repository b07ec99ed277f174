"""runtime/rehearse/patches.py and rehearse/__init__.py: the pure mappings (nccl → gloo, how many stand-ins)."""

from __future__ import annotations

from collections import Counter

import pytest

from distrain.runtime import rehearse
from distrain.runtime.rehearse import devices, patches


@pytest.fixture(autouse=True)
def counts(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    fresh: Counter[str] = Counter()
    monkeypatch.setattr(patches, "MAPPED", fresh)
    monkeypatch.setattr(devices, "MAPPED", fresh)
    return fresh


@pytest.mark.parametrize("backend", ["nccl", "NCCL", "cpu:gloo,cuda:nccl", None])
def test_nccl_or_no_backend_becomes_gloo(backend: str | None, counts: Counter[str]) -> None:
    assert patches._gloo(backend) == "gloo"
    assert counts["nccl → gloo"] == 1


@pytest.mark.parametrize("backend", ["gloo", "mpi"])
def test_other_backends_are_kept(backend: str, counts: Counter[str]) -> None:
    assert patches._gloo(backend) == backend
    assert counts == Counter()


@pytest.mark.parametrize(("raw", "count"), [(None, 0), ("", 0), ("4", 4), ("x", 0), ("-2", 0)])
def test_requested_stand_ins(monkeypatch: pytest.MonkeyPatch, raw: str | None, count: int) -> None:
    if raw is not None:
        monkeypatch.setenv("DISTRAIN_CPU_REHEARSAL", raw)
    assert rehearse.requested() == count


def test_install_does_nothing_unless_asked() -> None:
    assert rehearse.install() is False

"""process/cores.py: the cores a process may run on, split among the node's processes."""

from __future__ import annotations

import os

import pytest

from distrain.process import cores as cores_module
from distrain.process.cores import threads_per_process, usable_cores


def test_usable_cores_is_the_affinity_mask(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 2, 5}, raising=False)
    assert usable_cores() == 3


def test_usable_cores_falls_back_to_cpu_count(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_affinity(pid: int) -> set[int]:
        raise OSError("not supported")

    monkeypatch.setattr(os, "sched_getaffinity", no_affinity, raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 6)
    assert usable_cores() == 6


@pytest.mark.parametrize(
    ("cores", "local", "expected"), [(16, 4, 4), (16, 3, 5), (2, 8, 1), (8, 0, 8)]
)
def test_threads_per_process_splits_cores_evenly(
    monkeypatch: pytest.MonkeyPatch, cores: int, local: int, expected: int
) -> None:
    monkeypatch.setattr(cores_module, "usable_cores", lambda: cores)
    assert threads_per_process(local) == expected

"""process/cores.py: CPU thread count policy (explicit, DISTRAIN_NUM_THREADS, OMP > 1, split)."""

from __future__ import annotations

import pytest

from distrain.process import cores
from distrain.process.cores import choose_threads
from distrain.settings import Settings


@pytest.fixture(autouse=True)
def sixteen_cores(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cores, "usable_cores", lambda: 16)


def test_default_divides_the_cores_among_local_processes() -> None:
    assert choose_threads(4) == 4
    assert choose_threads(32) == 1


def test_an_explicit_request_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DISTRAIN_NUM_THREADS", "3")
    assert choose_threads(4, requested=6) == 6
    assert choose_threads(4, requested=0) == 1


def test_distrain_num_threads_beats_omp(monkeypatch: pytest.MonkeyPatch) -> None:
    from distrain.settings import Settings

    settings = Settings.read({"DISTRAIN_NUM_THREADS": "1", "OMP_NUM_THREADS": "8"})
    assert choose_threads(4, settings.threads, settings.omp_num_threads) == 1


def test_omp_num_threads_1_is_torchruns_default_not_a_choice() -> None:
    assert choose_threads(2, omp="1") == 8
    assert choose_threads(2, omp="3") == 3


@pytest.mark.parametrize("raw", ["0", "-2", "many", ""])
def test_unusable_values_are_ignored(raw: str) -> None:
    assert choose_threads(8, omp=Settings.read({"OMP_NUM_THREADS": raw}).omp_num_threads) == 2

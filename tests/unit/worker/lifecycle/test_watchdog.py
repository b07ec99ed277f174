"""lifecycle/watchdog.py: stuck-rank diagnosis and NCCL debug defaults (settings: test_settings)."""

from __future__ import annotations

import os

import pytest

from distrain.worker.lifecycle import hang_diagnosis
from distrain.worker.lifecycle.watchdog import diagnose
from distrain.worker.start.nccl_debug import nccl_debug_defaults


def test_nccl_debug_defaults_keep_user_values(
    monkeypatch: pytest.MonkeyPatch, writes_environ: None
) -> None:
    for name in (
        "TORCH_NCCL_ASYNC_ERROR_HANDLING",
        "TORCH_NCCL_DUMP_ON_TIMEOUT",
        "TORCH_NCCL_DEBUG_INFO_TEMP_FILE",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TORCH_NCCL_ASYNC_ERROR_HANDLING", "3")
    nccl_debug_defaults("/logs")
    assert os.environ["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "3"
    assert os.environ["TORCH_NCCL_DUMP_ON_TIMEOUT"] == "1"
    assert os.environ["TORCH_NCCL_DEBUG_INFO_TEMP_FILE"] == os.path.join(
        "/logs", "nccl_trace_rank_"
    )


def test_diagnose_names_silent_and_missing_ranks_first() -> None:
    beats = {0: {"step": 5, "in_torch": True}, 1: {"step": 5, "in_torch": True}}
    assert diagnose(beats, silent={1}, world_size=3) == (
        [1, 2],
        "stopped answering (process frozen or gone)",
    )


def test_diagnose_names_the_rank_behind_outside_torch() -> None:
    beats = {
        0: {"step": 9, "in_torch": True},
        1: {"step": 8, "in_torch": False},
        2: {"step": 9, "in_torch": True},
    }
    assert diagnose(beats, set(), 3) == ([1], "is not in a collective while the others wait for it")


def test_diagnose_when_every_rank_waits_in_torch() -> None:
    beats = {r: {"step": 4, "in_torch": True} for r in range(2)}
    ranks, why = diagnose(beats, set(), 2)
    assert ranks == [0, 1] and why.startswith("all wait inside torch")


def test_diagnose_plural_wording() -> None:
    beats = {0: {"step": 3, "in_torch": False}, 1: {"step": 3}, 2: {"step": 4, "in_torch": True}}
    assert diagnose(beats, set(), 3) == ([0, 1], "are not in a collective while the others wait")
    assert hang_diagnosis._in_torch({}) is False


def test_diagnose_a_lone_rank_names_where_it_is_stuck() -> None:
    """One rank: nobody waits for it (the wording seen on one GPU said "while the others wait")."""
    beat = {"step": 3, "in_torch": False}
    assert diagnose({0: beat}, set(), 1) == ([0], "is stuck outside torch (its own code)")
    assert diagnose({0: {**beat, "in_torch": True}}, set(), 1) == ([0], "is stuck inside torch")

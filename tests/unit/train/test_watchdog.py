"""train/watchdog.py: the DISTRAIN_WATCHDOG / DISTRAIN_TRAIN_TIMEOUT settings and the stuck-rank diagnosis."""

from __future__ import annotations

import datetime as dt
import os

import pytest

from distrain.train import watchdog
from distrain.train.watchdog import (
    DEFAULT_TRAIN_TIMEOUT,
    diagnose,
    nccl_debug_defaults,
    train_timeout,
    watchdog_seconds,
)


def test_train_timeout_reads_seconds(monkeypatch: pytest.MonkeyPatch) -> None:
    assert train_timeout() == DEFAULT_TRAIN_TIMEOUT == dt.timedelta(minutes=5)
    monkeypatch.setenv("DISTRAIN_TRAIN_TIMEOUT", "90")
    assert train_timeout() == dt.timedelta(seconds=90)
    monkeypatch.setenv("DISTRAIN_TRAIN_TIMEOUT", "ninety")
    assert train_timeout() == DEFAULT_TRAIN_TIMEOUT


@pytest.mark.parametrize("raw", ["-5", "inf"])
def test_train_timeout_ignores_non_positive_or_infinite_values(monkeypatch: pytest.MonkeyPatch, raw: str) -> None:
    monkeypatch.setenv("DISTRAIN_TRAIN_TIMEOUT", raw)
    assert train_timeout() == DEFAULT_TRAIN_TIMEOUT


def test_watchdog_seconds_explicit_wins_then_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    assert watchdog_seconds() is None
    monkeypatch.setenv("DISTRAIN_WATCHDOG", "45")
    assert watchdog_seconds() == 45.0
    assert watchdog_seconds(10) == 10.0
    assert watchdog_seconds(0) is None  # explicitly off
    monkeypatch.setenv("DISTRAIN_WATCHDOG", "-1")
    assert watchdog_seconds() is None


def test_nccl_debug_defaults_keep_user_values(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("TORCH_NCCL_ASYNC_ERROR_HANDLING", "TORCH_NCCL_DUMP_ON_TIMEOUT", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TORCH_NCCL_ASYNC_ERROR_HANDLING", "3")
    nccl_debug_defaults("/logs")
    assert os.environ["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "3"
    assert os.environ["TORCH_NCCL_DUMP_ON_TIMEOUT"] == "1"
    assert os.environ["TORCH_NCCL_DEBUG_INFO_TEMP_FILE"] == os.path.join("/logs", "nccl_trace_rank_")


def test_diagnose_names_silent_and_missing_ranks_first() -> None:
    beats = {0: {"step": 5, "in_torch": True}, 1: {"step": 5, "in_torch": True}}
    assert diagnose(beats, silent={1}, world_size=3) == ([1, 2], "stopped answering (process frozen or gone)")


def test_diagnose_names_the_rank_behind_outside_torch() -> None:
    beats = {0: {"step": 9, "in_torch": True}, 1: {"step": 8, "in_torch": False}, 2: {"step": 9, "in_torch": True}}
    assert diagnose(beats, set(), 3) == ([1], "is not in a collective while the others wait for it")


def test_diagnose_when_every_rank_waits_in_torch() -> None:
    beats = {r: {"step": 4, "in_torch": True} for r in range(2)}
    ranks, why = diagnose(beats, set(), 2)
    assert ranks == [0, 1] and why.startswith("all wait inside torch")


def test_diagnose_plural_wording() -> None:
    beats = {0: {"step": 3, "in_torch": False}, 1: {"step": 3}, 2: {"step": 4, "in_torch": True}}
    assert diagnose(beats, set(), 3) == ([0, 1], "are not in a collective while the others wait")
    assert watchdog._in_torch({}) is False

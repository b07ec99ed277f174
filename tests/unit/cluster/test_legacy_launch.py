"""cluster/legacy_launch.py: `torch.distributed.launch`'s --local-rank, off before argparse."""

from __future__ import annotations

import os
import sys

import pytest

from distrain.cluster import LegacyLaunchEnvironment, pop_local_rank_arg, strip_launcher_argv


@pytest.mark.parametrize(
    ("argv", "rank", "rest"),
    [(["t.py", "--local-rank=3", "--lr", "1"], 3, ["t.py", "--lr", "1"]),
     (["t.py", "--local_rank=0"], 0, ["t.py"]),
     (["t.py", "--epochs", "2", "--local_rank", "7"], 7, ["t.py", "--epochs", "2"]),
     (["t.py", "--lr", "1"], None, ["t.py", "--lr", "1"])],
)  # fmt: skip
def test_pop_local_rank_arg_removes_the_option(
    argv: list[str], rank: int | None, rest: list[str]
) -> None:
    assert pop_local_rank_arg(argv) == rank
    assert argv == rest


def test_pop_local_rank_arg_ignores_argv0_and_a_non_numeric_value() -> None:
    argv = ["--local-rank=1", "--local_rank", "x"]
    assert pop_local_rank_arg(argv) is None
    assert argv == ["--local-rank=1", "--local_rank", "x"]


def test_strip_only_inside_a_launched_job() -> None:
    sys.argv[:] = ["train.py", "--local-rank=2"]
    assert strip_launcher_argv() is None  # no WORLD_SIZE: a plain script's own option
    assert sys.argv == ["train.py", "--local-rank=2"]


def test_strip_inside_a_job_removes_it_once_and_remembers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WORLD_SIZE", "4")
    sys.argv[:] = ["train.py", "--local-rank=2", "--lr", "3"]
    assert strip_launcher_argv() == 2
    assert sys.argv == ["train.py", "--lr", "3"]
    assert strip_launcher_argv() == 2  # remembered, argv not searched again


def test_detect_and_local_rank_come_from_argv(
    monkeypatch: pytest.MonkeyPatch, writes_environ: None
) -> None:
    for k, v in {
        "RANK": "3",
        "WORLD_SIZE": "4",
        "LOCAL_RANK": "0",
        "MASTER_ADDR": "h",
        "MASTER_PORT": "1234",
    }.items():
        monkeypatch.setenv(k, v)
    sys.argv[:] = ["train.py", "--local_rank=1"]
    assert LegacyLaunchEnvironment.detect() is True
    env = LegacyLaunchEnvironment()
    assert (env.rank(), env.world_size(), env.local_rank()) == (
        3,
        4,
        1,
    )  # argv wins over LOCAL_RANK
    env.export_env()
    assert os.environ["LOCAL_RANK"] == "1"


def test_not_detected_without_the_argv_option(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert LegacyLaunchEnvironment.detect() is False

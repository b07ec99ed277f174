"""launch/replicas/events.py's end check: every group's final step and state, rank by rank."""

from __future__ import annotations

from pathlib import Path

import pytest

from distrain.coordination.replica_marks import ft_ended
from distrain.events import emit
from distrain.launch.replicas.events import ReplicaJob


def _job(tmp_path: Path, finals: dict[tuple[int, int], str], codes: dict[int, int]) -> ReplicaJob:
    job = ReplicaJob(2, str(tmp_path))
    for (group, rank), text in finals.items():
        step, digest = text.split()
        emit("replica", str(tmp_path), event="final", group=group, rank=rank, step=int(step),
             digest=digest)  # fmt: skip
    for group, code in codes.items():
        job.on_exit(group, code)
    return job


def test_equal_groups_pass_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    finals = {(g, r): f"60 {'ab' * 32 if r == 0 else 'cd' * 32}\n" for g in (0, 1) for r in (0, 1)}
    assert _job(tmp_path, finals, {0: 0, 1: 0}).check_finals() == 0
    assert (
        "replica groups 0, 1 ended at step 60 with equal states (rank 0: sha256 abababababab)"
        in capsys.readouterr().err
    )
    assert ft_ended(str(tmp_path), 1)  # the groups still running stop waiting for it


@pytest.mark.parametrize(
    ("other", "said"),
    [
        (
            "60 " + "ef" * 32,
            "rank 1 of group 0 at step 60, state cdcdcdcdcdcd, of group 1 at step 60, "
            "state efefefefefef",
        ),
        (
            "61 " + "cd" * 32,
            "rank 1 of group 0 at step 60, state cdcdcdcdcdcd, of group 1 at step 61, "
            "state cdcdcdcdcdcd",
        ),
    ],
)
def test_a_different_state_or_step_fails_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], other: str, said: str
) -> None:
    finals = {
        (0, 0): "60 " + "ab" * 32,
        (0, 1): "60 " + "cd" * 32,
        (1, 0): "60 " + "ab" * 32,
        (1, 1): other,
    }
    assert _job(tmp_path, finals, {0: 0, 1: 0}).check_finals() == 1
    lines = [line for line in capsys.readouterr().err.splitlines() if "error" in line]
    assert lines == [f"distrain run: error: replica groups ended with different states: {said}"]


def test_a_failed_group_is_not_compared(tmp_path: Path) -> None:
    finals = {(0, 0): "60 " + "ab" * 32, (1, 0): "12 " + "ef" * 32}
    assert (
        _job(tmp_path, finals, {0: 0, 1: 1}).check_finals() == 0
    )  # the job fails for group 1 anyway


@pytest.mark.parametrize(
    ("finals", "named"),
    [
        ({(0, 0): "60 " + "ab" * 32}, "replica group 1 ended"),  # one group reported, not the other
        ({}, "replica groups 0, 1 ended"),  # none did: the check once passed without a word
    ],
)
def test_a_group_that_reports_no_final_state_fails_on_the_last_line(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    finals: dict[tuple[int, int], str],
    named: str,
) -> None:
    assert _job(tmp_path, finals, {0: 0, 1: 0}).check_finals() == 1
    last = capsys.readouterr().err.splitlines()[-1]
    assert last.startswith(f"distrain run: error: {named} without reporting a final state"), last


def test_a_refusal_is_said_once_and_the_workers_exits_after_it_are_no_news(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    job = ReplicaJob(2, str(tmp_path))
    for group in (0, 1):
        emit("replica", str(tmp_path), event="refused", group=group, rank=0, reason="x.py: no")
        emit("replica", str(tmp_path), event="lost", group=group, rank=0, pid=1, exitcode=3)
    job.read_events()
    assert job.refused == "x.py: no"
    assert capsys.readouterr().err.splitlines() == ["distrain run: error: x.py: no"]

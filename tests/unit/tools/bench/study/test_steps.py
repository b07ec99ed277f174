"""tools/bench/study/steps.py and its use in summary.py: throughput from timed steps, not whole
epochs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from distrain.tools.bench.study.probe import pick_size
from distrain.tools.bench.study.report import timing_note
from distrain.tools.bench.study.steps import (
    combine,
    rank_intervals,
    read_steps,
    steady_stats,
    warmup_count,
)
from distrain.tools.bench.study.summary import run_stats


def test_intervals_stay_inside_one_epoch() -> None:
    # epoch 1 ends at t=3; evaluation until t=10; epoch 2's first step ends at t=11
    steps = [[1, 0.0, 32], [1, 1.0, 32], [1, 3.0, 32], [2, 11.0, 32], [2, 12.5, 16]]
    assert rank_intervals(steps) == [(1, 1.0, 32.0), (1, 2.0, 32.0), (2, 1.5, 16.0)]


def test_a_step_of_the_job_is_its_slowest_rank_with_every_rank_samples() -> None:
    r0 = [(1, 1.0, 32.0), (1, 2.0, 32.0), (1, 1.0, 32.0)]
    r1 = [(1, 1.5, 32.0), (1, 1.0, 32.0)]  # stopped a step early: the third step is left out
    assert combine([r0, r1]) == [
        {"epoch": 1, "seconds": 1.5, "samples": 64.0},
        {"epoch": 1, "seconds": 2.0, "samples": 64.0},
    ]
    assert combine([]) == []


@pytest.mark.parametrize(
    ("n", "skip"), [(0, 0), (1, 0), (2, 1), (4, 3), (30, 3), (45, 4), (200, 20)]
)
def test_warm_up_is_ten_percent_at_least_three_leaving_one(n: int, skip: int) -> None:
    assert warmup_count(n) == skip


def test_steady_stats_drop_warm_up_and_take_the_median() -> None:
    # 3 slow warm-up steps, then 9 steps of 0.1 s and one 10× outlier (a burst of load)
    steps = [{"epoch": 1, "seconds": 1.0, "samples": 64}] * 3 + [
        {"epoch": 1, "seconds": 0.1, "samples": 64}
    ] * 9
    steps.append({"epoch": 2, "seconds": 1.0, "samples": 64})
    stats = steady_stats(steps)
    assert (stats["timed_steps"], stats["warmup_steps"]) == (10, 3)
    assert stats["step_seconds_median"] == 0.1
    assert stats["step_samples_per_s"] == pytest.approx(
        640.0
    )  # the whole-run average would say 832 / 2.2 = 378
    assert stats["step_seconds_p90"] == pytest.approx(0.19)


def test_steady_stats_without_steps() -> None:
    assert steady_stats([])["step_samples_per_s"] is None
    assert steady_stats([{"epoch": 1, "seconds": 0.0, "samples": 8}])["timed_steps"] == 0


def test_read_steps_combines_rank_files(tmp_path: Path) -> None:
    (tmp_path / "bench").mkdir()
    for rank, times in ((0, [0.0, 0.2, 0.4]), (1, [0.0, 0.3, 0.4])):
        steps = [[1, t, 32] for t in times]
        (tmp_path / "bench" / f"steps-rank-{rank}.json").write_text(
            json.dumps({"rank": rank, "steps": steps})
        )
    got = read_steps(tmp_path)
    assert [s["seconds"] for s in got] == pytest.approx([0.3, 0.2]) and [
        s["samples"] for s in got
    ] == [64, 64]
    assert read_steps(tmp_path / "nothing") == []
    (tmp_path / "bench" / "steps-rank-1.json").write_text('{"half')
    assert (
        read_steps(tmp_path) == []
    )  # one rank's file is broken: no step timing at all, not half of it


def test_run_stats_prefer_timed_steps_over_epochs() -> None:
    epochs = [{"seconds": 10.0, "samples": 1000}, {"seconds": 5.0, "samples": 1000}]
    steps = [{"epoch": 1, "seconds": 0.5, "samples": 100}] * 4 + [
        {"epoch": 2, "seconds": 0.4, "samples": 100}
    ] * 6
    stats = run_stats({"epochs": epochs, "steps": steps})
    assert stats["timing"] == "steps" and stats["samples_per_s"] == pytest.approx(250.0)
    assert stats["time_per_epoch_mean"] == 5.0  # the epoch chart keeps measured epochs
    plain = run_stats({"epochs": epochs})
    assert (
        plain["timing"] == "epochs"
        and plain["samples_per_s"] == 200.0
        and plain["step_seconds_median"] is None
    )


def test_timing_note_names_the_source() -> None:
    assert timing_note([{"name": "a", "timing": "steps"}]).startswith(
        "samples/s is the median over timed steps"
    )
    assert "records no step times" in timing_note([{"name": "a", "timing": "epochs"}])
    mixed = timing_note([{"name": "a", "timing": "steps"}, {"name": "b", "timing": "epochs"}])
    assert "for a; for the others" in mixed


@pytest.mark.parametrize(("size", "secs", "target", "want"), [
    (32, 0.04, 0.15, 64),    # 32 · √3.75 = 62 → 64
    (32, 0.15, 0.15, 32),
    (32, 0.5, 0.15, 32),     # a slow machine: never below 32
    (32, 0.001, 0.15, 160),  # capped
    (32, 0.0, 0.15, 32),
])  # fmt: skip
def test_probe_picks_the_image_side_for_the_target_step(
    size: int, secs: float, target: float, want: int
) -> None:
    assert pick_size(size, secs, target) == want

"""The end-of-job lines: breakdown line, straggler rule, advice rule
(launch/report/job_summary.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from distrain.contract import JOB_DIR
from distrain.events import emit
from distrain.launch.report import job_summary
from distrain.launch.report.job_summary import STRAGGLER_SLOWER, advice, lines, read, straggler


def rank(r: int, compute_ms: float = 10.0, device: str = "cpu", **seconds: float) -> dict:
    parts = {
        "data": 1.0,
        "compute": 6.0,
        "comm": 2.0,
        "optimizer": 0.5,
        "checkpoint": 0.0,
        "other": 0.5,
    }
    parts.update(seconds)
    return {
        "rank": r,
        "world_size": 4,
        "host": "vm",
        "pid": 4240 + r,
        "device": device,
        "steps": 100,
        "seconds": parts,
        "compute_median_s": compute_ms / 1000,
        "step_median_s": 0.02,
        "num_workers": 0,
    }


def test_balanced_job_has_no_straggler() -> None:
    assert straggler([rank(0, 10), rank(1, 12), rank(2, 11), rank(3, 14)]) is None


def test_slow_rank_is_compared_with_the_median_of_the_others() -> None:
    found = straggler([rank(0, 10), rank(1, 25), rank(2, 10), rank(3, 12)])
    assert found is not None and found[0]["rank"] == 1 and found[1] == pytest.approx(1.5)


def test_on_cpu_the_rule_compares_cpu_time_not_wall_time() -> None:
    """Wall time stretched by other processes on the cores is not a straggler; more work is."""
    stretched = [
        {**rank(0, 10), "compute_cpu_median_s": 0.003},
        {**rank(1, 25), "compute_cpu_median_s": 0.0031},
    ]
    assert straggler(stretched) is None
    working = [
        {**rank(0, 10), "compute_cpu_median_s": 0.003},
        {**rank(1, 10), "compute_cpu_median_s": 0.0066},
    ]
    found = straggler(working)
    assert found is not None and found[0]["rank"] == 1 and found[1] == pytest.approx(1.2)


def test_threshold_is_half_again_the_others() -> None:
    assert straggler([rank(0, 10), rank(1, 14.5)]) is None
    found = straggler([rank(0, 10, "cuda"), rank(1, 15.5, "cuda")])
    assert found is not None and found[1] == pytest.approx(0.55) and STRAGGLER_SLOWER == 0.5


def test_tiny_steps_need_an_absolute_gap_too() -> None:
    assert straggler([rank(0, 0.2), rank(1, 0.9)]) is None  # 4.5x, but 0.7 ms
    assert straggler([rank(0, 10)]) is None  # one rank: nobody to compare with


def test_data_advice_names_num_workers() -> None:
    tip = advice([rank(0, data=8.0), rank(1, data=7.0)])
    assert tip is not None and "num_workers (now 0)" in tip and "prepare_loader" in tip


def test_comm_advice_names_hook_bucket_and_link() -> None:
    tip = advice([rank(0, comm=9.0), rank(1, comm=9.0)])
    assert tip is not None and "comm_hook" in tip and "bucket_cap_mb" in tip and "link" in tip


def test_no_advice_on_a_compute_bound_job_and_no_comm_advice_behind_a_straggler() -> None:
    assert advice([rank(0), rank(1)]) is None
    assert advice([rank(0, comm=9.0), rank(1, comm=9.0)], has_straggler=True) is None
    # both over their thresholds: the larger share wins
    tip = advice([rank(0, data=10.0, comm=8.0)])
    assert tip is not None and "num_workers" in tip


def test_lines_for_a_job_with_a_straggler() -> None:
    out = lines([rank(0, 10), rank(1, 30), rank(2, 10), rank(3, 11)])
    assert out[0].startswith(
        "distrain: step time (rank 0, 100 steps, 20.0 ms/step median): data 10 % · compute 60 %"
    )
    assert "slowest rank 1 (compute 30.0 ms/step)" in out[0]
    assert "checkpoint" not in out[0]  # shown only when a save held the loop
    assert (
        out[1] == "distrain: straggler: rank 1 (host vm, pid 4241) computes 200 % slower "
        "than the median rank"
    )
    assert len(out) == 2


def test_lines_say_when_only_this_nodes_ranks_reported() -> None:
    out = lines([rank(0), rank(1)])
    assert "2 of 4 ranks reported" in out[0] and len(out) == 1
    assert lines([]) == [] and lines([{**rank(0), "steps": 0}]) == []


def test_events_round_trip_and_bad_events_are_skipped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    env: dict[str, str] = {}
    folder = job_summary.start(env)
    assert env[JOB_DIR] == folder
    emit("breakdown", folder, summary=rank(1, 30))
    emit("breakdown", folder, summary=rank(0, 10))
    emit("breakdown", folder, summary="torn")
    emit("breakdown", folder, summary={"no": "rank"})
    assert [r["rank"] for r in read(folder)] == [0, 1]
    job_summary.finish(folder)
    err = capsys.readouterr().err
    assert "distrain: straggler: rank 1 (host vm, pid 4241) computes 200 % slower" in err
    assert not Path(folder).exists()


def test_checkpoint_advice_names_every_steps_and_async_save() -> None:
    tip = advice([rank(0, checkpoint=4.0), rank(1, checkpoint=3.0)])
    assert tip is not None and "checkpoint saves hold the loop for" in tip
    assert "every_steps" in tip and "async_save=True" in tip


def test_no_advice_from_a_job_too_short_to_judge() -> None:
    """A job that crashed after 5 steps measured its warm-up: no comm_hook advice (issue 34)."""
    heavy_comm = [rank(r, comm=8.0) for r in range(2)]
    assert advice(heavy_comm) is not None and "comm_hook" in advice(heavy_comm)
    short = [{**r, "steps": 5} for r in heavy_comm]
    assert advice(short) is None
    assert not any("advice" in line for line in lines(short))
    assert advice([{**r, "steps": job_summary.ADVICE_MIN_STEPS} for r in heavy_comm]) is not None


def test_replica_group_label_on_the_step_time_line() -> None:
    """Under --replicas every group prints a step-time line: each says which group it is."""
    text = lines([rank(0), rank(1)], group="1")[0]
    assert text.startswith("distrain: step time (group 1, rank 0, 100 steps,"), text
    assert lines([rank(0)])[0].startswith("distrain: step time (rank 0, "), lines([rank(0)])

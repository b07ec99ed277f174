"""tools/bench/study/summary.py: per-run statistics, rounds, speedup and efficiency, their
sentences."""

from __future__ import annotations

from typing import Any

import pytest

from distrain.tools.bench.study.summary import add_scaling, aggregate, interpret, run_stats


def _run(
    name: str,
    nproc: int,
    sps: float | None,
    *,
    sync_bn: bool = False,
    status: str = "ok",
    threads: int = 1,
    **extra: Any,
) -> dict[str, Any]:
    return {
        "name": name,
        "nproc": nproc,
        "sync_bn": sync_bn,
        "status": status,
        "samples_per_s": sps,
        "threads": threads,
        **extra,
    }


def test_run_stats_leave_the_warm_up_epoch_out() -> None:
    run = {"epochs": [{"seconds": 10.0, "samples": 1000}, {"seconds": 4.0, "samples": 1000},
                      {"seconds": 6.0, "samples": 1000, "test_acc": 0.9,
                       "test_loss": 0.3}]}  # fmt: skip
    stats = run_stats(run)
    assert (stats["epochs_done"], stats["timed_epochs"]) == (3, 2)
    assert stats["time_per_epoch_mean"] == 5.0
    assert stats["time_per_epoch_std"] == pytest.approx(2**0.5)
    assert stats["samples_per_s"] == 200.0  # 2000 samples / 10 s, warm-up excluded
    assert (stats["final_test_acc"], stats["final_test_loss"]) == (0.9, 0.3)


def test_run_stats_with_one_epoch_times_it_and_without_any_is_empty() -> None:
    one = run_stats({"epochs": [{"seconds": 2.0, "samples": 100}]})
    assert (
        one["timed_epochs"],
        one["time_per_epoch_mean"],
        one["time_per_epoch_std"],
        one["samples_per_s"],
    ) == (1, 2.0, 0.0, 50.0)
    none = run_stats({"epochs": []})
    assert none["samples_per_s"] is None and none["final_test_acc"] is None


def test_run_stats_ignore_unfinished_epochs_and_zero_samples() -> None:
    stats = run_stats({"epochs": [{"seconds": 0}, {"seconds": None}, {"seconds": 3.0}]})
    assert stats["timed_epochs"] == 1 and stats["samples_per_s"] is None


def test_add_scaling_speedup_and_efficiency() -> None:
    runs = [_run("n1", 1, 100.0), _run("n2", 2, 180.0), _run("n4", 4, 300.0),
            _run("n4-sbn", 4, 250.0, sync_bn=True),
            _run("n8", 8, None, status="failed")]  # fmt: skip
    base = add_scaling(runs)
    assert base is runs[0]
    assert [r["speedup"] for r in runs[:4]] == [1.0, 1.8, 3.0, 2.5]
    assert [r["efficiency"] for r in runs[:4]] == [1.0, 0.9, 0.75, 0.625]
    assert runs[4]["speedup"] is None and runs[4]["efficiency"] is None


def test_efficiency_is_per_core_used() -> None:
    runs = [
        _run("one-all-cores", 1, 400.0, threads=4, all_cores=True),
        _run("n1", 1, 100.0),
        _run("n4", 4, 320.0),
    ]
    add_scaling(runs)
    assert (
        runs[0]["speedup"] == 4.0 and runs[0]["efficiency"] == 1.0
    )  # 4× the throughput on 4× the cores
    assert runs[2]["efficiency"] == pytest.approx(0.8)


def test_efficiency_divides_by_cores_relative_to_a_multi_core_baseline() -> None:
    runs = [_run("n2", 2, 200.0, threads=2), _run("n4", 4, 360.0, threads=2)]
    assert add_scaling(runs) is runs[0]
    assert runs[1]["speedup"] == 1.8 and runs[1]["efficiency"] == pytest.approx(1.8 * 4 / 8)


def test_add_scaling_without_a_finished_run() -> None:
    runs = [_run("n1", 1, None, status="failed")]
    assert add_scaling(runs) is None and runs[0]["speedup"] is None


def _round(
    name: str, rnd: int, sps: float, seconds: list[float], status: str = "ok"
) -> dict[str, Any]:
    return {**_run(name, 2, sps, status=status), "round": rnd, "log": f"{name}-{rnd}.txt",
            "time_per_epoch_mean": sum(seconds[1:]) / max(1, len(seconds) - 1),
            "epochs": [{"seconds": s} for s in seconds], "peak_rss_mb_total": 100.0 * rnd,
            "peak_rss_mb_per_process": 50.0 * rnd}  # fmt: skip


def test_aggregate_takes_medians_over_rounds() -> None:
    rows = aggregate(
        [
            _round("a", 1, 100.0, [9, 2, 2]),
            _round("a", 2, 300.0, [9, 4, 4]),
            _round("a", 3, 200.0, [9, 3, 3]),
        ]
    )
    (row,) = rows
    assert (row["rounds"], row["status"], row["error"]) == (3, "ok", "")
    assert row["samples_per_s"] == 200.0 and row["samples_per_s_rounds"] == [100.0, 300.0, 200.0]
    assert row["time_per_epoch_mean"] == 3.0
    assert row["peak_rss_mb_total"] == 300.0 and row["logs"] == ["a-1.txt", "a-2.txt", "a-3.txt"]
    assert "round" not in row and "log" not in row


def test_aggregate_marks_a_configuration_failed_when_any_round_failed() -> None:
    bad = {**_round("b", 2, 0.0, [1], status="failed"), "error": "killed"}
    rows = aggregate([_round("b", 1, 100.0, [5, 1]), bad, _round("c", 1, 50.0, [5, 2])])
    assert [r["name"] for r in rows] == ["b", "c"]
    assert rows[0]["status"] == "failed" and rows[0]["error"] == "round 2: killed"
    assert rows[0]["samples_per_s"] == 100.0  # the ok round's


def test_interpret_states_the_numbers() -> None:
    runs = [_run("n1", 1, 100.0, time_per_epoch_mean=8.0, final_test_acc=0.95),
            _run("n4", 4, 380.0, time_per_epoch_mean=2.1, final_test_acc=0.94)]  # fmt: skip
    add_scaling(runs)
    out = interpret(runs, {"usable_cores": 8, "load_average": [0.5]})
    assert out["time_per_epoch"] == ("Time per epoch falls from 8.00 s on 1 process to 2.10 s "
                                     "on 4 processes: "
                                     "3.81× faster where 4× is ideal.")  # fmt: skip
    assert out["throughput"].startswith(
        "Scaling efficiency (throughput_N / (N × throughput_1)) is 95 % at 4; lowest at "
        "4: close to ideal"
    )
    assert "94.0 % on 4 processes (-1.0 points)" in out["accuracy_scaling"]
    assert "failed" not in out


def test_interpret_explains_oversubscription_and_lists_failures() -> None:
    runs = [_run("n1", 1, 100.0, time_per_epoch_mean=8.0),
            _run("n16", 16, 400.0, time_per_epoch_mean=2.0),
            _run("n32", 32, None, status="failed")]  # fmt: skip
    add_scaling(runs)
    out = interpret(runs, {"usable_cores": 8})
    assert "16 processes exceed the 8 usable cores" in out["throughput"]
    assert out["failed"].startswith("1 run(s) failed: n32")

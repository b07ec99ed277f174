"""`distrain bench scaling`: real `distrain run` jobs at 1 and 2 processes, report, charts."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from helpers import SCRIPTS, python, run
from PIL import Image

from distrain.process.cores import usable_cores

BENCH = [python(), "-m", "distrain.cli", "bench", "scaling"]
STEPS = str(SCRIPTS / "bench_steps.py")  # a training loop the size of a test
CHARTS = ["time_per_epoch.png", "throughput.png", "accuracy_scaling.png", "accuracy_syncbn.png"]


def _table(report: str) -> dict[str, dict[str, str]]:
    """The report's results table as {run name: {header: cell}}."""
    lines = [ln for ln in report.splitlines() if ln.startswith("|")]
    headers = [h.strip() for h in lines[0].strip("|").split("|")]
    rows = {}
    for ln in lines[2:]:
        cells = [c.strip() for c in ln.strip("|").split("|")]
        rows[cells[0]] = dict(zip(headers, cells, strict=True))
    return rows


def _close(cell: str, value: float | None, digits: int) -> bool:
    if value is None:
        return cell == "—"
    return abs(float(cell.rstrip(" %")) - value) <= 0.51 * 10**-digits


@pytest.mark.timeout(420)
@pytest.mark.slow
def test_digits_report_1_and_2_processes(tmp_path: Path) -> None:
    out = tmp_path / "report"
    # one epoch: the timed steps come from inside an epoch, and every per-epoch field is checked on
    # it
    args = [
        "--workload",
        "digits",
        "--nproc",
        "1,2",
        "--sync-bn",
        "both",
        "--epochs",
        "1",
        "--batch-size",
        "64",
        "--out",
        str(out),
    ]
    res = run(BENCH + args, timeout=400)
    assert res.returncode == 0, res.stderr[-3000:]

    for name in ["report.md", "results.json", *CHARTS]:
        assert (out / name).is_file(), name
    for name in CHARTS:
        with Image.open(out / name) as img:
            img.verify()
        with Image.open(out / name) as img:
            assert img.format == "PNG" and 400 <= img.width <= 2000 and 300 <= img.height <= 1500, (
                name,
                img.size,
            )

    results = json.loads((out / "results.json").read_text())
    runs = {r["name"]: r for r in results["configs"]}
    assert set(runs) == {"n1-bn", "n1-allcores", "n2-bn", "n2-syncbn"}
    assert [r["name"] for r in results["rounds"]] == ["n1-bn", "n1-allcores", "n2-bn", "n2-syncbn"]
    for r in runs.values():
        assert r["status"] == "ok" and r["exit_code"] == 0 and r["rounds"] == 1
        assert len(r["epochs"]) == 1
        assert all(e["seconds"] > 0 and e["samples"] > 0 for e in r["epochs"])
        assert all(0.0 <= e["test_acc"] <= 1.0 for e in r["epochs"])
        assert (
            r["time_per_epoch_mean"] > 0
            and r["samples_per_s"] > 0
            and r["peak_rss_mb_per_process"] > 0
        )
        assert 0.0 <= r["final_test_acc"] <= 1.0
        # every training sample of the split is seen once per epoch, whatever the process count full
        # global batches only (the short last one is dropped on every world size): 1438 // 64 * 64 =
        # 1438 // 128 * 128
        assert r["epochs"][0]["samples"] == 1408
    assert runs["n1-bn"]["efficiency"] == pytest.approx(1.0)
    # the baseline a CPU user has: one process on every core; efficiency is per core used
    allc = runs["n1-allcores"]
    assert (
        allc["threads"] == usable_cores() and allc["nproc"] == 1 and results["baseline"] == "n1-bn"
    )
    assert allc["efficiency"] == pytest.approx(
        allc["samples_per_s"] / runs["n1-bn"]["samples_per_s"] / 2
    )
    assert (
        f"One process with {usable_cores()} threads (all cores, no distrain)"
        in results["interpretation"]["throughput"]
    )
    assert runs["n2-bn"]["efficiency"] == pytest.approx(
        runs["n2-bn"]["samples_per_s"] / (2 * runs["n1-bn"]["samples_per_s"])
    )
    assert (
        runs["n2-bn"]["peak_rss_mb_total"] > runs["n2-bn"]["peak_rss_mb_per_process"]
    )  # two workers counted

    report = (out / "report.md").read_text()
    table = _table(report)
    assert set(table) == set(runs)
    for name, r in runs.items():
        row = table[name]
        assert row["processes"] == str(r["nproc"]) and row["status"] == "ok"
        assert row["SyncBN"] == ("yes" if r["sync_bn"] else "no")
        assert _close(row["time/epoch (s)"], r["time_per_epoch_mean"], 3)
        assert _close(row["samples/s"], r["samples_per_s"], 1)
        assert _close(row["efficiency"], r["efficiency"] * 100, 1)
        assert _close(row["test acc"], r["final_test_acc"], 4)
    for chart in CHARTS:
        assert f"]({chart})" in report
    assert (
        "distrain bench scaling --workload digits --nproc 1,2" in report
        and "load average" in report
    )
    assert results["interpretation"]["accuracy_syncbn"].startswith("On 2 processes")

    # --resume reuses every finished run: same numbers, no new training
    res2 = run(BENCH + args + ["--resume"], timeout=120)
    assert res2.returncode == 0, res2.stderr[-3000:]
    assert res2.stderr.count("reusing the finished run") == 4
    again = {r["name"]: r for r in json.loads((out / "results.json").read_text())["configs"]}
    assert {k: v["epochs"] for k, v in again.items()} == {k: v["epochs"] for k, v in runs.items()}


@pytest.mark.slow
def test_cpu_rehearsal_runs_the_study_on_stand_in_gpus(tmp_path: Path) -> None:
    out = tmp_path / "report"
    # one process: what --cpu changes is the same for every size (test_rehearse runs 2 and 3), and
    # 1 in --nproc is where an all-cores row would be added
    res = run(
        BENCH
        + [
            "--cpu",
            "--workload",
            "digits",
            "--nproc",
            "1",
            "--epochs",
            "1",
            "--batch-size",
            "64",
            "--out",
            str(out),
        ],
        timeout=300,
        env={"DISTRAIN_DEVICE": ""},
    )  # the script picks its device itself, as on a GPU machine
    assert res.returncode == 0, res.stderr[-3000:]
    runs = {r["name"]: r for r in json.loads((out / "results.json").read_text())["configs"]}
    assert set(runs) == {"n1-bn"}  # no all-cores row: a GPU job has no such baseline
    r = runs["n1-bn"]
    assert r["status"] == "ok" and r["epochs"][0]["samples"] == 1408, r
    log = Path(r["logs"][0]).read_text()
    assert "1 CPU process stands in for 1 GPU" in log, log[-2000:]
    # the digits script picks cuda:<local rank> and NCCL as on a GPU machine; gloo formed underneath
    assert (
        "backend gloo · device cuda" in log and "mapped in" in log and "cannot rehearse" not in log
    ), log[-2000:]


@pytest.mark.timeout(240)
@pytest.mark.slow
def test_failing_run_is_reported_not_dropped(tmp_path: Path) -> None:
    out = tmp_path / "out"
    res = run(
        BENCH
        + [
            "--nproc",
            "1,2",
            "--no-all-cores",
            "--repeat",
            "2",
            "--out",
            str(out),
            STEPS,
            "--",
            "--fail-on",
            "2",
        ],
        timeout=220,
    )
    assert res.returncode == 1
    assert (
        "1 run(s) failed (n2-bn)" in res.stderr and "Traceback" not in res.stderr.split("n2-bn")[-1]
    )
    results = json.loads((out / "results.json").read_text())
    # rounds are interleaved in time: 1, 2, 1, 2
    assert [(r["name"], r["round"]) for r in results["rounds"]] == [
        ("n1-bn", 1),
        ("n2-bn", 1),
        ("n1-bn", 2),
        ("n2-bn", 2),
    ]
    runs = {r["name"]: r for r in results["configs"]}
    assert runs["n1-bn"]["status"] == "ok" and runs["n1-bn"]["samples_per_s"] > 0
    # the epochs come from ctx.log: 5 steps of 10 samples, accuracy logged after each epoch
    assert [(e["epoch"], e["samples"], e["test_acc"]) for e in runs["n1-bn"]["epochs"]] == [
        (1, 50, 0.5),
        (2, 50, 0.5),
    ]
    assert runs["n1-bn"]["rounds"] == 2 and len(runs["n1-bn"]["samples_per_s_rounds"]) == 2
    assert runs["n2-bn"]["status"] == "failed" and runs["n2-bn"]["exit_code"] != 0
    report = (out / "report.md").read_text()
    assert _table(report)["n2-bn"]["status"] == "failed"
    assert re.search(
        r"\*\*n2-bn\*\*: round 1: exit code \d+: boom: this script refuses to run on 2", report
    )
    for chart in CHARTS[:3]:
        assert (out / chart).is_file()
    # no SyncBN run: no empty SyncBN chart, and the report shows none (its note says why)
    assert not (out / "accuracy_syncbn.png").exists() and "](accuracy_syncbn.png)" not in report


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--nproc", "0"], "--nproc expects positive integers like 1,2,4 (got '0')"),
        (["--epochs", "0"], "--epochs must be at least 1"),
        (["no_such_script.py"], "script not found: no_such_script.py"),
        (["--workload", "imagefolder"], "--workload imagefolder needs --data DIR"),
        (
            ["--workload", "imagefolder", "--data", "/nonexistent/dir"],
            "--data /nonexistent/dir: not a directory",
        ),
    ],
)
def test_bad_input_is_one_line(args: list[str], message: str, tmp_path: Path) -> None:
    res = run(BENCH + args + ["--out", str(tmp_path / "o")], timeout=60)
    assert res.returncode == 2
    assert message in res.stderr
    assert res.stderr.strip().count("\n") == 0 and "Traceback" not in res.stderr


def test_unwritable_out_dir(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    res = run(BENCH + ["--nproc", "1", "--out", str(blocker / "report")], timeout=60)
    assert res.returncode == 2
    assert res.stderr.startswith(
        f"distrain bench scaling: error: cannot write to --out {blocker / 'report'}"
    )
    assert "Traceback" not in res.stderr


def test_unknown_bench_subcommand() -> None:
    res = run([python(), "-m", "distrain.cli", "bench", "scalin"], timeout=60)
    assert res.returncode == 2
    assert (
        res.stderr.strip()
        == "distrain bench: error: unknown benchmark 'scalin' (choose from comm, scaling)"
    )

"""The step breakdown in real 2-rank jobs: end-of-job lines, `top --json`, records, TensorBoard.

Three short jobs of tests/scripts/breakdown_job.py: rank 1 made slow in forward (a straggler,
with a plain ``loss.backward()`` / ``opt.step()`` loop), a dataset that sleeps with no loader
workers (the data advice), and a balanced one (neither).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from helpers import SCRIPTS, distrain_run, python, run

from distrain.monitor import rank_file

CLI = [python(), "-m", "distrain.cli"]
PHASES = {"data", "compute", "comm", "optimizer", "checkpoint", "other"}
STRAGGLER = re.compile(
    r"^distrain: straggler: rank (\d+) \(host (\S+), pid (\d+)\) computes (\d+) % slower than "
    r"the median rank$",
    re.M,
)


def job(tmp_path: Path, *args: str) -> tuple[str, Path]:
    """Run breakdown_job.py on 2 ranks with a run directory; (launcher's stderr, run dir)."""
    run_dir = tmp_path / "run"
    res = distrain_run(
        *("-n", "2", "--run-dir", str(run_dir), str(SCRIPTS / "breakdown_job.py"), *args),
        timeout=180,
        env={"DISTRAIN_METRICS_INTERVAL": "0.2"},
        check=True,
    )
    assert "done 60 steps" in res.stdout or "done 40 steps" in res.stdout, res.stdout
    return res.stderr, run_dir


@pytest.mark.timeout(240)
@pytest.mark.slow
def test_slow_rank_is_named_and_top_shows_every_ranks_breakdown(tmp_path: Path) -> None:
    err, run_dir = job(tmp_path, "--slow-rank", "1", "--slow-s", "0.015", "--plain")
    found = STRAGGLER.findall(err)
    assert len(found) == 1 and found[0][0] == "1" and int(found[0][3]) >= 100, err
    first = json.loads(rank_file(run_dir, 1).read_text().splitlines()[0])
    assert found[0][1:3] == (first["host"], str(first["pid"]))  # the rank's own host and pid
    line = next(
        x for x in err.splitlines() if x.startswith("distrain: step time (rank 0, 59 steps")
    )
    assert "slowest rank 1" in line and "compute" in line and "comm" in line
    assert "num_workers" not in err
    # distrain top --json: every rank's shares over the window, summing to 1
    snapshot = json.loads(run([*CLI, "top", str(run_dir), "--json"], timeout=60, check=True).stdout)
    assert [r["rank"] for r in snapshot["ranks"]] == [0, 1]
    for r in snapshot["ranks"]:
        assert set(r["breakdown"]) == PHASES and abs(sum(r["breakdown"].values()) - 1) < 0.01, r
    # rank 1 computes most of its step; rank 0 waits for it in the all-reduce (comm)
    by_rank = {r["rank"]: r["breakdown"] for r in snapshot["ranks"]}
    assert (
        by_rank[1]["compute"] > by_rank[0]["compute"] and by_rank[0]["comm"] > by_rank[1]["comm"]
    ), by_rank
    table = run([*CLI, "top", str(run_dir), "--once"], timeout=60, check=True).stdout
    assert "comp%" in table and "comm%" in table
    # ctx.log's records carry it, and rank 0's TensorBoard has a curve per phase
    records = [json.loads(x) for x in rank_file(run_dir, 0).read_text().splitlines()]
    assert any(set(r.get("breakdown", {})) == PHASES for r in records)
    assert records[-1]["breakdown_s"]["steps"] == 59
    events = b"".join(p.read_bytes() for p in (run_dir / "tensorboard").rglob("events.*"))
    assert b"breakdown/compute" in events and b"breakdown/comm" in events


@pytest.mark.timeout(240)
@pytest.mark.slow
def test_slow_dataset_without_workers_gets_the_data_advice(tmp_path: Path) -> None:
    err, _ = job(tmp_path, "--data-sleep", "0.001", "--steps", "40")
    advice = [x for x in err.splitlines() if x.startswith("distrain: advice:")]
    assert (
        len(advice) == 1
        and "data loading takes" in advice[0]
        and "num_workers (now 0)" in advice[0]
    ), err
    assert not STRAGGLER.search(err), err


@pytest.mark.timeout(240)
@pytest.mark.slow
def test_balanced_job_gets_no_straggler_and_no_data_advice(tmp_path: Path) -> None:
    err, _ = job(tmp_path)
    assert "distrain: step time (rank 0, 59 steps" in err, err
    assert not STRAGGLER.search(err) and "num_workers" not in err, err
